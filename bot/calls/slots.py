"""Concurrency caps for tool calls: one global, one per session; waiting for a slot is `pending`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class Slots:
    def __init__(self, *, max_concurrent: int, max_per_session: int) -> None:
        self._global = asyncio.Semaphore(max_concurrent)
        self._max_per_session = max_per_session
        self._sessions: dict[str, asyncio.Semaphore] = {}

    @contextlib.asynccontextmanager
    async def hold(self, session_key: str) -> AsyncIterator[None]:
        """Hold a session slot, then a global one: a busy thread cannot take every global slot."""
        session = self._sessions.setdefault(session_key, asyncio.Semaphore(self._max_per_session))
        async with session, self._global:
            yield

    def full(self, session_key: str) -> bool:
        """Whether a call of this session would wait now: its session's cap or the global one is reached."""
        session = self._sessions.get(session_key)
        return self._global.locked() or (session is not None and session.locked())

    def forget(self, session_key: str) -> None:
        """Drop an idle session's semaphore (call only when the session has no open call)."""
        self._sessions.pop(session_key, None)
