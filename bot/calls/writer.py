"""Group commit for tool-call state: every save is awaited, but concurrent saves share one transaction.

A thousand calls changing state at once would otherwise queue a thousand
transactions behind the store's single connection. Callers still wait until
their state is on disk, so "written through" keeps its meaning.
"""

from __future__ import annotations

import asyncio
import logging

from bot.store import Store
from bot.toolcall import ToolCall

log = logging.getLogger(__name__)


class CallWriter:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._dirty: dict[str, ToolCall] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._scheduled: set[str] = set()

    async def save(self, call: ToolCall) -> None:
        """Return once a transaction holding this call's current state has committed."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.save_soon(call)
        # Shielded: a caller cancelled while waiting must not lose the other callers' writes.
        await asyncio.shield(waiter)

    def save_soon(self, call: ToolCall) -> None:
        """Queue the call's state for the next commit without waiting for it (progress, `running`)."""
        self._dirty[call.id] = call
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="call-writer")

    def save_within(self, call: ToolCall, delay_s: float) -> None:
        """Save the call's state at most `delay_s` from now; calls in between share that one save."""
        if call.id in self._scheduled:
            return
        self._scheduled.add(call.id)
        asyncio.get_running_loop().call_later(delay_s, self._save_scheduled, call)

    def _save_scheduled(self, call: ToolCall) -> None:
        self._scheduled.discard(call.id)
        if not call.is_final:  # a final state was saved (and awaited) on its own
            self.save_soon(call)

    async def drain(self) -> None:
        """Wait until everything queued so far is written (at shutdown, before the store closes)."""
        if self._flusher is not None:
            await asyncio.wait([self._flusher])

    async def _flush(self) -> None:
        while self._dirty:
            batch, self._dirty = list(self._dirty.values()), {}
            waiters, self._waiters = self._waiters, []
            try:
                await self._store.save_calls(batch)
            except Exception as exc:
                log.exception("saving %d tool calls failed", len(batch))
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
            else:
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
