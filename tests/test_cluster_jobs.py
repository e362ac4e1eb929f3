"""ThreadJobs against a real PostgreSQL: one turn per thread across replicas, deferral in a caller's
transaction, stalled-job recovery past the queueing-lock trap, and a stop that waits for the running turns."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest
from cluster_support import PgSchema, pg_fixture  # noqa: F401  (registers the fixture)
from conftest import WAIT_S

from bot.cluster.jobs import ThreadJobs
from bot.store.pg_schema import apply_jobs_schema, has_jobs_schema

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def dsn(pg: PgSchema) -> str:
    async with await pg.connect() as conn:
        await apply_jobs_schema(conn)
    return pg.dsn


class Turns:
    """A turn handler that records starts, tracks overlap per thread and blocks until released."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.active: collections.Counter[str] = collections.Counter()
        self.max_active: collections.Counter[str] = collections.Counter()
        self.release = asyncio.Event()
        self._changed = asyncio.Condition()

    async def run(self, session_key: str) -> None:
        key = session_key
        self.active[key] += 1
        self.max_active[key] = max(self.max_active[key], self.active[key])
        async with self._changed:
            self.started.append(key)
            self._changed.notify_all()
        try:
            await self.release.wait()
        finally:
            self.active[key] -= 1

    async def until(self, check: Callable[[list[str]], bool]) -> None:
        async with asyncio.timeout(WAIT_S), self._changed:
            await self._changed.wait_for(lambda: check(self.started))


@pytest.fixture
async def replicas(dsn: str) -> AsyncIterator[tuple[Turns, ThreadJobs, ThreadJobs]]:
    """Two replicas' ThreadJobs on one database, one recording handler. Their polling (every 2 s) only backs
    up a notification missed while a worker starts: procrastinate begins listening beside its first fetch, so a
    job deferred between the two is seen at the next poll (the suite once waited out a 60 s one)."""
    turns = Turns()
    a = ThreadJobs(dsn=dsn, run=turns.run, worker_name="a", heartbeat_s=0.5, poll_s=2)
    b = ThreadJobs(dsn=dsn, run=turns.run, worker_name="b", heartbeat_s=0.5, poll_s=2)
    async with a, b:
        await a.start(concurrency=4)
        await b.start(concurrency=4)
        try:
            yield turns, a, b
        finally:
            turns.release.set()
            await a.stop()
            await b.stop()


async def job_states(dsn: str) -> list[tuple[str, str]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT args->>'session_key', status::text FROM procrastinate_jobs ORDER BY id")
        return [(str(k), str(s)) for k, s in await cur.fetchall()]


async def test_schema_helpers(pg: PgSchema) -> None:
    async with await pg.connect() as conn:
        assert not await has_jobs_schema(conn)
        assert await apply_jobs_schema(conn)
        assert await has_jobs_schema(conn)
        assert not await apply_jobs_schema(conn)  # once only


async def test_one_turn_per_thread_across_replicas_and_one_more_waits(
    replicas: tuple[Turns, ThreadJobs, ThreadJobs], dsn: str
) -> None:
    turns, a, b = replicas
    assert await a.offer("k1")
    await turns.until(lambda s: s == ["k1"])
    assert await b.offer("k1")  # queued behind the running one: the lock holds it on both replicas
    assert not await a.offer("k1")  # a queued job will see it
    assert not await b.offer("k1")
    assert await b.offer("k2")  # other threads are not held up
    await turns.until(lambda s: "k2" in s)
    assert turns.started.count("k1") == 1
    turns.release.set()
    await turns.until(lambda s: s.count("k1") == 2)
    assert turns.max_active == {"k1": 1, "k2": 1}


async def test_offer_inside_a_transaction_survives_the_queueing_lock(dsn: str) -> None:
    turns = Turns()
    async with (
        ThreadJobs(dsn=dsn, run=turns.run, worker_name="a") as jobs,
        await psycopg.AsyncConnection.connect(dsn) as conn,
    ):
        await conn.execute("CREATE TABLE inputs (v TEXT)")
        await conn.commit()
        async with conn.transaction():
            await conn.execute("INSERT INTO inputs VALUES ('one')")
            assert await jobs.offer("k", conn)
            assert not await jobs.offer("k", conn)
            await conn.execute("INSERT INTO inputs VALUES ('two')")  # the transaction is still usable
            assert await job_states(dsn) == []  # not visible before commit
        assert await job_states(dsn) == [("k", "todo")]
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                assert await jobs.offer("other", conn)
                raise RuntimeError("caller rolls back")
        cur = await conn.execute("SELECT count(*) FROM inputs")
        assert await cur.fetchone() == (2,)
    assert await job_states(dsn) == [("k", "todo")]


async def stall_a_job(dsn: str, key: str) -> int:
    """Play a replica that took `key`'s job and died: its worker holds a doing job, its row says dead."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT procrastinate_register_worker_v1()")
        worker = (await cur.fetchone() or [None])[0]
        cur = await conn.execute("SELECT id, args->>'session_key' FROM procrastinate_fetch_job_v2(NULL, %s)", (worker,))
        job_id, got = await cur.fetchone() or (None, None)
        assert got == key
        await conn.execute(
            "INSERT INTO replicas (id, host, pid, state, worker_id) VALUES (%s, 'h', 1, 'dead', %s)",
            (f"dead-{worker}", worker),
        )
        return int(job_id)


async def test_recover_stalled_past_the_retry_job_trap(dsn: str) -> None:
    turns = Turns()
    async with ThreadJobs(dsn=dsn, run=turns.run, worker_name="a") as jobs:
        await jobs.offer("k")
        stalled = await stall_a_job(dsn, "k")
        assert await jobs.offer("k")  # a twin queued behind the stalled job's lock
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.UniqueViolation):  # procrastinate's documented recipe
                await conn.execute("SELECT procrastinate_retry_job_v2(%s, now(), NULL, NULL, NULL)", (stalled,))
        assert await jobs.recover_stalled() == ["k"]
        assert await job_states(dsn) == [("k", "failed"), ("k", "todo")]
        assert await jobs.recover_stalled() == []
        await jobs.start(concurrency=2)
        turns.release.set()
        await turns.until(lambda s: s == ["k"])  # the twin runs now that the lock is free
        await jobs.stop()


async def test_recover_stalled_without_a_twin_defers_a_fresh_job_once_across_racers(dsn: str) -> None:
    turns = Turns()
    racers = [ThreadJobs(dsn=dsn, run=turns.run, worker_name=f"r{i}") for i in range(4)]
    for r in racers:
        await r.open()
    try:
        for key in ("k1", "k2", "k3"):
            await racers[0].offer(key)
            await stall_a_job(dsn, key)
        results = await asyncio.gather(*(r.recover_stalled() for r in racers))
    finally:
        for r in racers:
            await r.close()
    assert sorted(k for keys in results for k in keys) == ["k1", "k2", "k3"]
    states = await job_states(dsn)
    assert sorted(states) == sorted([(k, s) for k in ("k1", "k2", "k3") for s in ("failed", "todo")])


async def test_a_live_worker_is_not_stalled_even_when_its_heartbeat_lags(
    replicas: tuple[Turns, ThreadJobs, ThreadJobs], dsn: str
) -> None:
    turns, a, _ = replicas
    await a.offer("k")
    await turns.until(lambda s: s == ["k"])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("UPDATE procrastinate_workers SET last_heartbeat = now() - interval '1 hour'")
    assert await a.recover_stalled() == []  # its replica is not gone: a busy pool is no death


async def test_stop_takes_no_new_turns_and_waits_for_the_running_one(dsn: str) -> None:
    turns = Turns()
    async with ThreadJobs(dsn=dsn, run=turns.run, worker_name="a", poll_s=0.1) as jobs:
        await jobs.start(concurrency=2)
        await jobs.offer("k")
        await turns.until(lambda s: s == ["k"])
        stopping = asyncio.create_task(jobs.stop())
        await asyncio.sleep(0)  # stop() has told the worker: from here on it fetches nothing
        await jobs.offer("other")
        assert not stopping.done()
        turns.release.set()
        await stopping
    assert turns.started == ["k"]
    assert await job_states(dsn) == [("k", "succeeded"), ("other", "todo")]
