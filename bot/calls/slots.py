"""Concurrency caps for tool calls, shaped by what a call occupies; waiting for a slot is `pending`.

Threads and subprocesses cost the machine (the default thread pool has a handful of
workers; each process takes memory and CPU), so they share one tight global cap, a
per-session one, and one per person across their threads, so that nobody can hold
every global slot. A call that only awaits I/O costs a coroutine: a hundred sleeps or
remote calls waiting side by side are no load, and throttling them like processes
only serialises idle waits. They have their own, much higher cap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from tools.base import ToolKind


class Slots:
    def __init__(
        self, *, max_concurrent: int, max_per_session: int, max_io: int, max_per_user: int | None = None
    ) -> None:
        self._global = asyncio.Semaphore(max_concurrent)
        self._io = asyncio.Semaphore(max_io)
        self._max_per_session = max_per_session
        self._max_per_user = max_per_user
        self._sessions: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, asyncio.Semaphore] = {}
        self._user_calls: dict[str, int] = {}
        """Calls holding or waiting for each user's semaphore: it is dropped when none is left."""

    @contextlib.asynccontextmanager
    async def hold(
        self,
        session_key: str,
        kind: ToolKind,
        *,
        user: str | None = None,
        on_user_wait: Callable[[int], None] | None = None,
    ) -> AsyncIterator[None]:
        """Hold the slots a call of this kind needs until the block ends.

        A thread or process call takes a session slot, then one of the person's who asked (`user`),
        then a global one, so a busy thread cannot take every slot of its person, nor one person
        every global slot; an I/O call takes only an I/O slot. `on_user_wait` is told the cap when
        the call must wait for the person's own calls to end.
        """
        if kind is ToolKind.IO:
            async with self._io:
                yield
            return
        session = self._sessions.setdefault(session_key, asyncio.Semaphore(self._max_per_session))
        async with session, self._user_slot(user, on_user_wait), self._global:
            yield

    @contextlib.asynccontextmanager
    async def _user_slot(self, user: str | None, on_wait: Callable[[int], None] | None) -> AsyncIterator[None]:
        if user is None or self._max_per_user is None:
            yield
            return
        semaphore = self._users.setdefault(user, asyncio.Semaphore(self._max_per_user))
        self._user_calls[user] = self._user_calls.get(user, 0) + 1
        try:
            if semaphore.locked() and on_wait is not None:
                on_wait(self._max_per_user)
            async with semaphore:
                yield
        finally:
            self._user_calls[user] -= 1
            if not self._user_calls[user]:
                del self._user_calls[user], self._users[user]

    def full(self, session_key: str, kind: ToolKind) -> bool:
        """Whether a call of this kind in this session would wait now: its session's or the global cap is reached.

        A person's cap is not asked here (a call does not carry its person); a call it holds back says so
        in its progress instead."""
        if kind is ToolKind.IO:
            return self._io.locked()
        session = self._sessions.get(session_key)
        return self._global.locked() or (session is not None and session.locked())

    def forget(self, session_key: str) -> None:
        """Drop an idle session's semaphore (call only when the session has no open call)."""
        self._sessions.pop(session_key, None)
