"""Replicas against a real PostgreSQL: leases, reaping once, self-fencing, graceful marks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from cluster_support import PgSchema, pg_fixture  # noqa: F401  (registers the fixture)
from conftest import WAIT_S

from bot.cluster.replicas import Replicas

pytestmark = pytest.mark.timeout(30)


class Lost:
    def __init__(self) -> None:
        self.fired = asyncio.Event()
        self.times = 0

    async def __call__(self) -> None:
        self.times += 1
        self.fired.set()


@pytest.fixture
async def make(pg: PgSchema) -> AsyncIterator[list[tuple[Replicas, Lost]]]:
    """A list the test fills with registered replicas (via `new`); all are closed afterwards."""
    made: list[tuple[Replicas, Lost]] = []
    yield made
    for replica, _ in made:
        await replica.close()


async def new(pg: PgSchema, made: list[tuple[Replicas, Lost]], **kw: float) -> tuple[Replicas, Lost]:
    lost = Lost()
    replica = Replicas(dsn=pg.dsn, lost=lost, **kw)
    made.append((replica, lost))
    await replica.register()
    return replica, lost


async def age(pg: PgSchema, replica_id: str) -> None:
    """Make a replica's last heartbeat an hour old, as if it had died then."""
    async with await pg.connect() as conn:
        await conn.execute("UPDATE replicas SET heartbeat_at = now() - interval '1 hour' WHERE id = %s", (replica_id,))


async def states(pg: PgSchema) -> dict[str, str]:
    async with await pg.connect() as conn:
        cur = await conn.execute("SELECT id, state FROM replicas")
        return {str(i): str(s) for i, s in await cur.fetchall()}


async def test_the_survivor_reaps_a_silent_replica_once_and_the_stale_one_learns_it(
    pg: PgSchema, make: list[tuple[Replicas, Lost]]
) -> None:
    a, _ = await new(pg, make, interval_s=60)
    b, b_lost = await new(pg, make, interval_s=0.05)
    assert a.id != b.id and a.id.count("-") >= 2
    assert await a.live_count() == 2
    assert await a.reap(lease_s=10) == []
    await age(pg, b.id)  # b paused (GC, SIGSTOP) past its lease
    assert await a.live_count() == 1
    assert await a.reap(lease_s=10) == [b.id]
    assert await a.reap(lease_s=10) == []
    async with asyncio.timeout(WAIT_S):
        await b_lost.fired.wait()  # b's next heartbeat finds its row dead and must stop itself
    assert b_lost.times == 1
    assert (await states(pg))[b.id] == "dead"


async def test_lost_fires_when_heartbeats_fail_past_the_lease(pg: PgSchema, make: list[tuple[Replicas, Lost]]) -> None:
    replica, lost = await new(pg, make, interval_s=0.05, lease_s=0.3)
    async with await pg.connect() as blocker, blocker.transaction():
        await blocker.execute("SELECT 1 FROM replicas WHERE id = %s FOR UPDATE", (replica.id,))  # heartbeats hang
        async with asyncio.timeout(WAIT_S):
            await lost.fired.wait()
    assert lost.times == 1


async def test_reapers_racing_claim_each_dead_replica_once(pg: PgSchema, make: list[tuple[Replicas, Lost]]) -> None:
    reapers = [(await new(pg, make, interval_s=60))[0] for _ in range(6)]
    dead = [f"gone-{i}" for i in range(10)]
    async with await pg.connect() as conn:
        for replica_id in dead:
            await conn.execute(
                "INSERT INTO replicas (id, host, pid, heartbeat_at) VALUES (%s, 'h', 1, now() - interval '1 hour')",
                (replica_id,),
            )
    claims = await asyncio.gather(*(r.reap(lease_s=10) for r in reapers))
    claimed = [replica_id for c in claims for replica_id in c]
    assert sorted(claimed) == sorted(dead)


async def test_graceful_exit_marks_and_is_never_reaped(pg: PgSchema, make: list[tuple[Replicas, Lost]]) -> None:
    a, _ = await new(pg, make, interval_s=60)
    b, b_lost = await new(pg, make, interval_s=0.05)
    c, _ = await new(pg, make, interval_s=60)
    await b.mark_stopping()
    assert await b.heartbeat()  # a draining replica keeps its lease
    assert await a.live_count() == 3
    await b.mark_stopped()
    await c.mark_stopping()
    await age(pg, b.id)
    await age(pg, c.id)
    assert await a.reap(lease_s=10) == [c.id]  # died while draining: reaped; b left cleanly: not
    assert await states(pg) == {a.id: "alive", b.id: "stopped", c.id: "dead"}
    assert await a.live_count() == 1
    assert not b_lost.fired.is_set()
