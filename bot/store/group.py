"""Group commit: every write is awaited, but the writes that arrive together share one transaction.

Hundreds of turns booking a model call's tokens, or settling a post Slack confirmed, at the same
moment would otherwise queue as many transactions (a commit each) behind the store's single
connection. Callers still wait until their item is on disk, so "written through" keeps its meaning.
Items are keyed: a newer item under a key not yet written replaces the older one (a call's state).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class GroupCommit(Generic[T]):
    """Items handed to `write` in batches: whatever arrived while the previous batch was being written."""

    def __init__(self, write: Callable[[Sequence[T]], Awaitable[None]], what: str) -> None:
        """`what` names the items in the log line of a failed batch."""
        self._write = write
        self._what = what
        self._pending: dict[Hashable, T] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def add(self, key: Hashable, item: T) -> None:
        """Return once a transaction holding `item` (or a newer item under `key`) has committed."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.add_soon(key, item)
        # Shielded: a caller cancelled while waiting must not lose the other callers' writes.
        await asyncio.shield(waiter)

    def add_soon(self, key: Hashable, item: T) -> None:
        """Queue `item` for the next batch without waiting for it."""
        self._pending[key] = item
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name=f"group-commit:{self._what}")

    async def drain(self) -> None:
        """Wait until everything queued so far is written (at shutdown, before the store closes)."""
        if self._flusher is not None:
            await asyncio.wait([self._flusher])

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = list(self._pending.values()), {}
            waiters, self._waiters = self._waiters, []
            try:
                await self._write(batch)
            except Exception as exc:
                log.exception("writing %d %s failed", len(batch), self._what)
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
            else:
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
