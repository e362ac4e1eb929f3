"""Doorbell against a real PostgreSQL: delivery, commit-time delivery, reconnect with backstop, latency."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest
from cluster_support import PgSchema, pg_fixture  # noqa: F401  (registers the fixture)
from conftest import WAIT_S
from store_backends import scratch_schema

from bot.cluster.doorbell import Doorbell, Ring, channel_for

pytestmark = pytest.mark.timeout(30)


class Heard:
    """What a replica's doorbell delivered: rings (with arrival times) and backstop runs."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.rings: list[Ring] = []
        self.arrived: dict[str, float] = {}
        self.backstops = 0
        self._fail_on = fail_on
        self._changed = asyncio.Condition()

    async def handler(self, ring: Ring) -> None:
        self.arrived[ring.key] = time.perf_counter()
        async with self._changed:
            self.rings.append(ring)
            self._changed.notify_all()
        if ring.kind == self._fail_on:
            raise RuntimeError("a handler bug")

    async def backstop(self) -> None:
        async with self._changed:
            self.backstops += 1
            self._changed.notify_all()

    async def until(self, check: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S), self._changed:
            await self._changed.wait_for(check)

    def ring_keys(self) -> list[str]:
        return [r.key for r in self.rings]


@pytest.fixture
async def bells(pg: PgSchema) -> AsyncIterator[tuple[Heard, Doorbell, Doorbell]]:
    """The owner's doorbell (listening, recording) and another replica's, used to ring."""
    heard, other = Heard(fail_on="boom"), Heard()
    owner = Doorbell(dsn=pg.dsn, handler=heard.handler, backstop=heard.backstop, backstop_s=60)
    ringer = Doorbell(dsn=pg.dsn, handler=other.handler, backstop=other.backstop, backstop_s=60)
    await owner.start()
    try:
        yield heard, owner, ringer
    finally:
        await owner.stop()
        await ringer.stop()


async def test_a_ring_reaches_the_handler_with_its_extras(
    bells: tuple[Heard, Doorbell, Doorbell], pg: PgSchema
) -> None:
    heard, owner, ringer = bells
    async with await pg.connect() as conn:
        await conn.execute("SELECT pg_notify(%s, 'not a ring')", (owner.channel,))
        await conn.execute("SELECT pg_notify(%s, '[1]')", (owner.channel,))
    await ringer.ring("boom", "k0")  # a failing handler does not stop the listener
    await ringer.ring("cancel", "k1", call_id="c7", by="U1")
    await heard.until(lambda: len(heard.rings) == 2)
    assert heard.rings[1] == Ring("cancel", "k1", {"call_id": "c7", "by": "U1"})


async def test_a_ring_in_a_transaction_arrives_at_commit(bells: tuple[Heard, Doorbell, Doorbell], pg: PgSchema) -> None:
    heard, _, ringer = bells
    async with await psycopg.AsyncConnection.connect(pg.dsn) as conn:
        await ringer.ring("inject", "in-tx", conn)
        await ringer.ring("inject", "outside")
        await heard.until(lambda: "outside" in heard.ring_keys())
        assert "in-tx" not in heard.ring_keys()
        await conn.commit()
    await heard.until(lambda: "in-tx" in heard.ring_keys())


async def test_reconnects_runs_the_backstop_and_hears_again(
    bells: tuple[Heard, Doorbell, Doorbell], pg: PgSchema
) -> None:
    heard, owner, ringer = bells
    async with await pg.connect() as conn:
        cur = await conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
            (f"threadbot doorbell {owner.channel}",),
        )
        assert await cur.fetchone() == (1,)  # only the listener: the ringer has not connected yet
    await heard.until(lambda: heard.backstops == 1)
    await ringer.ring("inject", "after")
    await heard.until(lambda: heard.ring_keys() == ["after"])


async def test_deployments_in_two_schemas_of_one_database_never_hear_each_other(pg: PgSchema) -> None:
    """NOTIFY is database-wide; each schema's doorbell has a channel of its own (their ring ids and thread
    keys overlap, so a ring heard across would cancel or answer the other deployment's work)."""
    here, there = Heard(), Heard()
    with scratch_schema() as other_dsn:
        bell = Doorbell(dsn=pg.dsn, handler=here.handler, backstop=here.backstop, backstop_s=60)
        other = Doorbell(dsn=other_dsn, handler=there.handler, backstop=there.backstop, backstop_s=60)
        await bell.start()
        await other.start()
        try:
            assert bell.channel != other.channel and bell.channel.startswith("threadbot:t_")
            await bell.ring("cancel", "slack:T1:C1:1.0", by="U1")
            await other.ring("cancel", "theirs")  # committed after ours: had ours crossed, it came first
            await there.until(lambda: there.ring_keys() == ["theirs"])
            await here.until(lambda: "slack:T1:C1:1.0" in here.ring_keys())
            assert here.ring_keys() == ["slack:T1:C1:1.0"] and there.ring_keys() == ["theirs"]
        finally:
            await bell.stop()
            await other.stop()


def test_a_schema_name_too_long_for_a_channel_is_digested() -> None:
    assert channel_for("public") == "threadbot:public"
    long = channel_for("s" * 63)
    assert len(long.encode()) <= 63 and long != channel_for("s" * 62 + "t")


async def test_the_backstop_also_runs_periodically(pg: PgSchema) -> None:
    heard = Heard()
    bell = Doorbell(dsn=pg.dsn, handler=heard.handler, backstop=heard.backstop, backstop_s=0.05)
    await bell.start()
    try:
        await heard.until(lambda: heard.backstops >= 3)
    finally:
        await bell.stop()


async def test_start_fails_plainly_without_a_database() -> None:
    heard = Heard()
    bell = Doorbell(dsn="postgresql://127.0.0.1:1/none", handler=heard.handler, backstop=heard.backstop)
    with pytest.raises(psycopg.OperationalError):
        await bell.start()


async def test_ring_to_handler_latency(bells: tuple[Heard, Doorbell, Doorbell]) -> None:
    heard, _, ringer = bells
    await ringer.ring("warm", "warm")
    await heard.until(lambda: len(heard.rings) == 1)
    latencies_ms: list[float] = []
    for i in range(200):
        key = f"k{i}"
        sent = time.perf_counter()
        await ringer.ring("inject", key)
        await heard.until(lambda key=key: key in heard.arrived)
        latencies_ms.append((heard.arrived[key] - sent) * 1000)
    cuts = statistics.quantiles(latencies_ms, n=100)
    print(
        f"doorbell ring->handler over 200: p50 {cuts[49]:.2f} ms, p95 {cuts[94]:.2f} ms, max {max(latencies_ms):.2f} ms"
    )
    assert cuts[94] < 100
