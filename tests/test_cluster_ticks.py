"""Ticks against a real PostgreSQL: each tick of a name runs once across replicas."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator

import pytest
from cluster_support import PgSchema, pg_fixture  # noqa: F401  (registers the fixture)
from conftest import WAIT_S

from bot.cluster.ticks import KEEP_TICKS, Ticks, next_tick

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def dsn(pg: PgSchema) -> str:
    return pg.dsn


@pytest.mark.parametrize(
    ("now_s", "interval_s", "expected"),
    [
        (0.0, 10.0, (1, 10.0)),
        (9.99, 10.0, (1, 10.0)),
        (10.0, 10.0, (2, 20.0)),  # exactly on a boundary: that tick is under way, the next one is due
        (1_764_590_000.5, 1800.0, (980_328, 1_764_590_400.0)),
        (0.30000000000000004, 0.1, (4, 0.4)),
    ],
)
def test_next_tick(now_s: float, interval_s: float, expected: tuple[int, float]) -> None:
    tick, due_s = next_tick(now_s, interval_s)
    assert tick == expected[0]
    assert due_s == pytest.approx(expected[1])


@pytest.fixture
async def replicas(dsn: str) -> AsyncIterator[list[Ticks]]:
    made = [Ticks(dsn=dsn, replica_id=f"r{i}") for i in range(3)]
    yield made
    for ticks in made:
        await ticks.close()


async def test_a_claim_is_won_once(replicas: list[Ticks]) -> None:
    wins = await asyncio.gather(*(t.claim("housekeeping", 7) for t in replicas * 3))
    assert wins.count(True) == 1
    assert await replicas[0].claim("heartbeat", 7)  # names are independent


async def test_old_claims_are_pruned(replicas: list[Ticks], pg: PgSchema) -> None:
    for tick in range(1, 31):
        assert await replicas[tick % 3].claim("heartbeat", tick)
    async with await pg.connect() as conn:
        cur = await conn.execute("SELECT min(tick), count(*) FROM ticks WHERE name = 'heartbeat'")
        assert await cur.fetchone() == (31 - KEEP_TICKS, KEEP_TICKS)


async def test_every_tick_runs_once_across_three_replicas(replicas: list[Ticks]) -> None:
    runs: collections.Counter[int] = collections.Counter()
    changed = asyncio.Condition()

    async def work(tick: int) -> None:
        async with changed:
            runs[tick] += 1
            changed.notify_all()
        if len(runs) == 1:
            raise RuntimeError("a failing tick does not stop its replica's loop")

    for ticks in replicas:
        ticks.every("heartbeat", 0.1, work)
    async with asyncio.timeout(WAIT_S), changed:
        await changed.wait_for(lambda: len(runs) >= 6)
    assert set(runs.values()) == {1}, runs
