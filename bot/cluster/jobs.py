"""Thread turns as procrastinate jobs, so one turn runs per thread across every replica.

Each deferral of `thread_turn` carries `lock` and `queueing_lock` both set to `thread:<key>`:
procrastinate's lock keeps a second job of the thread from starting while one is `doing`
anywhere, and its queueing lock keeps at most one more waiting. A deferral refused with
`AlreadyEnqueued` is therefore good news: a queued job will run the thread's turn and see
whatever input caused this offer, because inputs are durable rows read by the turn.

Stalled jobs (their replica died, or stopped without finishing them) are not retried with
procrastinate's `retry_job`: that moves the stalled job back to `todo`, which violates the
queueing lock when a twin already waits. Recovery finishes the stalled job
as failed, releasing the thread's lock, and defers a fresh job, which a waiting twin absorbs.

A job carries the W3C `traceparent` of the span that offered it (when tracing is on), so the turn
it runs on another replica continues that trace; a job that absorbed later offers keeps the first's.

A job queued behind a thread's lock starts as soon as the lock frees: the jobs schema carries
a trigger that wakes the workers then (`LOCK_RELEASE_DDL` in bot/store/pg_schema.py).

Connections use TCP keepalives (see `bot.cluster.link`) so a half-open link to the database
fails within seconds instead of hanging a worker forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import procrastinate
import psycopg
from procrastinate import exceptions as pq_exceptions
from procrastinate.worker import Worker

from bot.cluster.link import connection_kwargs
from bot.telemetry.tracing import traceparent

TASK_NAME = "thread_turn"
STALLED_WORKER_S = 60.0
"""When procrastinate prunes a silent worker's row; far past a replica's lease, so only the dead are pruned."""
_STALLED = """
SELECT j.id, j.args->>'session_key' FROM procrastinate_jobs AS j
WHERE j.status = 'doing' AND j.task_name = %s AND (j.worker_id IS NULL OR j.worker_id IN (
    SELECT worker_id FROM replicas WHERE state IN ('dead', 'stopped') AND worker_id IS NOT NULL
))
"""


def thread_lock(session_key: str) -> str:
    """The lock and queueing lock of one thread's jobs."""
    return f"thread:{session_key}"


class ThreadJobs:
    """The per-thread job queue of one replica: offers turns, runs the in-process worker, recovers stalls."""

    def __init__(
        self,
        *,
        dsn: str,
        run: Callable[..., Awaitable[None]],
        worker_name: str,
        heartbeat_s: float = 2.0,
        poll_s: float = 5.0,
        pool_max: int = 5,
        connect_timeout_s: int = 5,
    ) -> None:
        self._worker_name = worker_name
        self._heartbeat_s = heartbeat_s
        self._poll_s = poll_s
        self._connector = procrastinate.PsycopgConnector(
            conninfo=dsn, kwargs=connection_kwargs(connect_timeout_s), min_size=1, max_size=pool_max
        )
        self._app = procrastinate.App(connector=self._connector)
        self._task = self._app.task(name=TASK_NAME, pass_context=False)(run)
        self._worker: Worker | None = None
        self._worker_task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Open the connection pool; offers and recovery need it, the worker too."""
        await self._app.open_async()

    async def close(self) -> None:
        """Close the pool; call `stop` first if the worker runs."""
        await self._app.close_async()

    async def __aenter__(self) -> ThreadJobs:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def offer(self, session_key: str, conn: psycopg.AsyncConnection[Any] | None = None) -> bool:
        """Ask for a turn of the thread; False when a queued job already will run it.

        With `conn` (inside the caller's transaction) the job commits or rolls back with the
        caller's writes. The deferral runs in a savepoint so a refused queueing lock leaves that
        transaction usable.
        """
        lock = thread_lock(session_key)
        deferrer = self._task.configure(lock=lock, queueing_lock=lock, connection=conn)
        # The trace of what asked (a Slack event's span) goes with the job, to whichever replica runs it.
        args = {"session_key": session_key, **({"traceparent": parent} if (parent := traceparent()) else {})}
        try:
            if conn is None:
                await deferrer.defer_async(**args)
            else:
                async with conn.transaction():
                    await deferrer.defer_async(**args)
        except pq_exceptions.AlreadyEnqueued:
            return False
        return True

    async def start(self, *, concurrency: int) -> None:
        """Run the worker in this process, at most `concurrency` turns at once."""
        if self._worker_task is not None:
            raise RuntimeError("the worker is already running")
        self._worker = Worker(
            app=self._app,
            name=self._worker_name,
            concurrency=concurrency,
            fetch_job_polling_interval=self._poll_s,
            install_signal_handlers=False,
            update_heartbeat_interval=self._heartbeat_s,
            stalled_worker_timeout=STALLED_WORKER_S,
        )
        # procrastinate's Worker leaves run() and stop() unannotated.
        run = self._worker.run()  # type: ignore[no-untyped-call]
        self._worker_task = asyncio.create_task(run, name=f"worker {self._worker_name}")

    async def stop(self) -> None:
        """Stop taking jobs and wait for the running ones: the engine ends their turns (a grace period,
        then a cancel), and hands what they leave owed to the other replicas."""
        worker, task = self._worker, self._worker_task
        if worker is None or task is None:
            return
        self._worker = self._worker_task = None
        worker.stop()  # type: ignore[no-untyped-call]
        await task

    @property
    def worker_id(self) -> int | None:
        """The running worker's id in procrastinate's tables (once it has registered)."""
        return self._worker.worker_id if self._worker is not None else None

    async def recover_stalled(self) -> list[str]:
        """Fail the jobs whose replica is gone (dead, or stopped without finishing them) and re-offer
        their threads; a job whose worker row procrastinate pruned counts as gone too.

        The replicas table, not procrastinate's worker heartbeat, says who is gone: a live replica whose
        worker heartbeat lags (a busy pool) must not have its running turn taken over. Each job is failed
        and its fresh twin deferred in one transaction, so a crash in between cannot leave a thread
        without a turn. Safe on every replica at once: the row lock with SKIP LOCKED and the `doing`
        check let exactly one recover each job.
        """
        async with self._connector.pool.connection() as conn:
            cur = await conn.execute(_STALLED, (TASK_NAME,))
            stalled = [(int(job_id), str(key)) for job_id, key in await cur.fetchall()]
        recovered: list[str] = []
        for job_id, key in stalled:
            async with self._connector.pool.connection() as conn, conn.transaction():
                cur = await conn.execute(
                    "SELECT id FROM procrastinate_jobs WHERE id = %s AND status = 'doing' FOR UPDATE SKIP LOCKED",
                    (job_id,),
                )
                if await cur.fetchone() is None:
                    continue  # another replica recovered it, or it finished meanwhile
                await conn.execute("SELECT procrastinate_finish_job_v1(%s, 'failed', false)", (job_id,))
                await self.offer(key, conn)
            recovered.append(key)
        return recovered
