"""Concurrency caps for tool calls, shaped by what a call occupies; waiting for a slot is `pending`.

Threads and subprocesses cost the machine (the default thread pool has a handful of
workers; each process takes memory and CPU), so they share one tight global cap and
a per-session one. A call that only awaits I/O costs a coroutine: a hundred sleeps or
remote calls waiting side by side are no load, and throttling them like processes
only serialises idle waits. They have their own, much higher cap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from tools.base import ToolKind


class Slots:
    def __init__(self, *, max_concurrent: int, max_per_session: int, max_io: int) -> None:
        self._global = asyncio.Semaphore(max_concurrent)
        self._io = asyncio.Semaphore(max_io)
        self._max_per_session = max_per_session
        self._sessions: dict[str, asyncio.Semaphore] = {}

    @contextlib.asynccontextmanager
    async def hold(self, session_key: str, kind: ToolKind) -> AsyncIterator[None]:
        """Hold the slots a call of this kind needs until the block ends.

        A thread or process call takes a session slot, then a global one, so a busy
        thread cannot take every global slot; an I/O call takes only an I/O slot.
        """
        if kind is ToolKind.IO:
            async with self._io:
                yield
            return
        session = self._sessions.setdefault(session_key, asyncio.Semaphore(self._max_per_session))
        async with session, self._global:
            yield

    def full(self, session_key: str, kind: ToolKind) -> bool:
        """Whether a call of this kind in this session would wait now: a cap it counts against is reached."""
        if kind is ToolKind.IO:
            return self._io.locked()
        session = self._sessions.get(session_key)
        return self._global.locked() or (session is not None and session.locked())

    def forget(self, session_key: str) -> None:
        """Drop an idle session's semaphore (call only when the session has no open call)."""
        self._sessions.pop(session_key, None)
