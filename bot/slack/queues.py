"""Small concurrency helpers of the Slack edge: per-key FIFO workers and per-key locks.

Per-key FIFO workers: a session's Slack posts happen in the order the engine produced them.

The engine reports synchronously and must never wait for Slack, so the edge turns
each report into an operation queued under the session's key. One worker task per
busy key runs them one after another (a reply's second part is never posted before
its first) while different sessions proceed in parallel. A worker ends when its
queue is empty, so idle sessions cost nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable

log = logging.getLogger(__name__)

Operation = Callable[[], Awaitable[None]]


class SerialQueues:
    def __init__(self) -> None:
        self._queues: dict[str, deque[Operation]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    def put(self, key: str, operation: Operation) -> None:
        """Queue `operation` after everything already queued for `key`; never blocks."""
        self._queues.setdefault(key, deque()).append(operation)
        if key not in self._workers:
            self._idle.clear()
            self._workers[key] = asyncio.get_running_loop().create_task(self._work(key), name=f"slack-ops:{key}")

    async def _work(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue:
                operation = queue.popleft()
                try:
                    await operation()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("a Slack operation for %s failed", key)
        finally:
            del self._queues[key]
            del self._workers[key]
            if not self._workers:
                self._idle.set()

    @property
    def busy(self) -> int:
        """How many keys have work queued or running."""
        return len(self._workers)

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every queue is empty; cancel what is left after `timeout_s`. True if all ran."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            workers = list(self._workers.values())
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            return False
        return True


class KeyedLocks:
    """One lock per key, created on demand and dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
