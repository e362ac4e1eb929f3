"""Async helpers every layer shares: tracked background tasks, retry delays, a token bucket.

They sit below the engine and the edges alike, so a background task is owned, stopped and
reported the same way wherever it is started, and every retry grows by the same rule.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

_MAX_DOUBLINGS = 64
"""Past this many doublings every delay is at its ceiling anyway; 2.0**n would overflow much later."""


def backoff_s(attempt: int, *, first_s: float, max_s: float, jitter: float = 0.0) -> float:
    """The delay before retry number `attempt` (1 for the first): `first_s` doubled each time, at most `max_s`.

    `jitter` is a draw from [0, 1) (`random.random()`), passed in so this stays pure: it stretches the
    delay by up to a quarter, so callers that failed together do not retry in lockstep."""
    doublings = min(max(attempt - 1, 0), _MAX_DOUBLINGS)
    return min(max_s, first_s * 2.0**doublings) * (1.0 + jitter / 4)


class TokenBucket:
    """A rate budget: ``capacity`` calls at once, refilled at ``rate`` per second, and paused while the other side
    asks for a pause (a 429's ``Retry-After``). Pure (time is passed in) so it tests alone."""

    def __init__(self, rate: float, capacity: int, now: float) -> None:
        self.full_rate = rate
        """The rate for one process alone; `share` divides it among live replicas."""
        self.rate = rate
        self.capacity = float(capacity)
        self.tokens = float(capacity)
        self.updated = now
        self.paused_until = 0.0

    def wait_s(self, now: float) -> float:
        """Seconds until a token is available and no pause holds it back (0: now)."""
        self._refill(now)
        refill_s = 0.0 if self.tokens >= 1.0 - 1e-9 else (1.0 - self.tokens) / self.rate
        return max(self.paused_until - now, refill_s)

    def take(self, now: float) -> None:
        self._refill(now)
        self.tokens -= 1.0

    def try_take(self, now: float) -> bool:
        """Take a token if one is there now; False, and nothing taken, if not (for work that would rather do
        something else than wait)."""
        if self.wait_s(now) > 0:
            return False
        self.tokens -= 1.0
        return True

    def forgo(self, now: float) -> None:
        """The call taken earlier may have reached the other side as late as `now`: refill only from then, so
        this bucket never believes in a token the other side's has not got yet."""
        self.updated = max(self.updated, now)

    def drain(self, now: float) -> None:
        """The other side said we are over its limit: whatever we believed we had saved, we have not."""
        self._refill(now)
        self.tokens = min(self.tokens, 0.0)

    def pause(self, now: float, seconds: float) -> None:
        """No token for `seconds` from `now` (a longer pause already set stands)."""
        self.paused_until = max(self.paused_until, now + seconds)

    def rate_limited(self, now: float, retry_after_s: float) -> None:
        """The other side answered 429: nothing saved counts, and nothing goes before its `Retry-After`."""
        self.pause(now, retry_after_s)
        self.drain(now)

    def share(self, replicas: int) -> None:
        """The budget is the workspace's: with `replicas` live processes each spends its share."""
        self.rate = self.full_rate / max(1, replicas)

    def _refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + max(0.0, now - self.updated) * self.rate)
        self.updated = max(self.updated, now)


async def spend(bucket: TokenBucket, clock: Callable[[], float] = time.monotonic) -> None:
    """Wait for a token of `bucket` (and the end of its pause), then take it."""
    while True:
        wait_s = bucket.wait_s(clock())
        if wait_s <= 0:
            bucket.take(clock())
            return
        await asyncio.sleep(wait_s)


class NotAccepting(Exception):
    """Work offered to a `TaskSet` that is shutting down; it was not started."""


class TaskSet:
    """Background tasks in flight: started without waiting, each failure logged once, ended at shutdown.

    asyncio keeps only weak references to tasks, so a task nobody holds may vanish mid-run, and
    one nobody awaits reports its failure late or never. Owning them here fixes both, and gives
    every owner the same shutdown: stop taking work, wait a bounded time, cancel the rest."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._handed_back: set[asyncio.Task[Any]] = set()
        """Tasks whose failure `run` raises to its caller, who reports it: not logged here too."""
        self.accepting = True

    def spawn(self, coroutine: Coroutine[Any, Any, object], name: str) -> asyncio.Task[Any] | None:
        """Run `coroutine` in the background; None (and it is closed unrun) once shutting down.

        A failure is logged as "`name` failed"; a coroutine that reports its own failures should catch them."""
        if not self.accepting:
            coroutine.close()
            return None
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    async def run(self, coroutine: Coroutine[Any, Any, object], name: str) -> None:
        """`spawn` and wait for it to end, raising what it raised (its caller may act only on success, and
        reports the failure: it is not logged here). A cancelled caller does not cancel it, and a failure
        after that is logged; once shutting down it raises `NotAccepting` unrun."""
        task = self.spawn(coroutine, name)
        if task is None:
            raise NotAccepting(name)
        self._handed_back.add(task)
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            self._handed_back.discard(task)  # nobody is left to hear how it ends: a failure is logged
            raise
        if not task.cancelled() and (exc := task.exception()) is not None:
            raise exc

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task in self._handed_back:
            self._handed_back.discard(task)
        elif not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self, timeout_s: float = 0.0) -> None:
        """Stop taking work; let what runs finish for `timeout_s` (none by default), then cancel it and wait."""
        self.accepting = False
        if not self._tasks:
            return
        late = set(self._tasks)
        if timeout_s > 0:
            _, late = await asyncio.wait(late, timeout=timeout_s)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)
