"""Group commit for tool-call state: every save is awaited, but concurrent saves share one transaction.

A thousand calls changing state at once would otherwise queue a thousand
transactions behind the store's single connection. Callers still wait until
their state is on disk, so "written through" keeps its meaning (`GroupCommit`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from bot.store import Store
from bot.store.group import GroupCommit
from bot.toolcall import ToolCall


class CallWriter:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._group: GroupCommit[ToolCall] = GroupCommit(self._write, "tool calls")
        self._scheduled: set[str] = set()

    async def save(self, call: ToolCall) -> None:
        """Return once a transaction holding this call's current state has committed."""
        await self._group.add(call.id, call)

    def save_soon(self, call: ToolCall) -> None:
        """Queue the call's state for the next commit without waiting for it (progress, `running`)."""
        self._group.add_soon(call.id, call)

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

    async def _write(self, calls: Sequence[ToolCall]) -> None:
        await self._store.save_calls(calls)  # looked up per batch: a test may stand in for the store's method

    async def drain(self) -> None:
        """Wait until everything queued so far is written (at shutdown, before the store closes)."""
        await self._group.drain()
