"""Forgetting: a session's stored data deleted on request (`forget`) or once it has been idle too long.

What goes is everything that holds the conversation's text: the session row and, through its foreign
keys, its aliases, messages, archive, tool calls (with their displays and process groups), reminders
(with their owed posts) and inbox rows; the outbox has no foreign key and is deleted by hand. What
stays is `model_usage`: token totals, which name the session but hold none of its text.

A session is idle since its newest trace: the last message appended, inbox row claimed or call
created, or its creation when it has none. No column of its own is needed for that.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from datetime import datetime

from bot.store.db import Db
from bot.store.schema import ts

_LAST_SEEN = """
SELECT s.key FROM sessions AS s
WHERE s.key LIKE ? AND s.created_at < ?
  AND NOT EXISTS (SELECT 1 FROM messages AS m WHERE m.session_key = s.key AND m.created_at >= ?)
  AND NOT EXISTS (SELECT 1 FROM inbox AS i WHERE i.session_key = s.key AND i.claimed_at >= ?)
  AND NOT EXISTS (SELECT 1 FROM tool_calls AS c WHERE c.session_key = s.key AND c.created_at >= ?)
  AND NOT EXISTS (SELECT 1 FROM reminders AS r WHERE r.session_key = s.key AND r.status = 'pending')
ORDER BY s.key
"""


class ForgetQueries(ABC):
    @abstractmethod
    def _read(self) -> AbstractAsyncContextManager[Db]: ...

    @abstractmethod
    def _write(self) -> AbstractAsyncContextManager[Db]: ...

    async def idle_sessions(self, since: datetime, *, prefix: str = "") -> list[str]:
        """Keys (starting with `prefix`) of sessions with no trace since `since` and no pending wait or reminder:
        a reminder still to come is a promise, and its session is not idle."""
        moment = ts(since)
        async with self._read() as db:
            rows = await db.fetch(_LAST_SEEN, f"{prefix}%", moment, moment, moment, moment)
        return [str(row[0]) for row in rows]

    async def forget_session(self, key: str) -> bool:
        """Delete the session and everything holding its text (token totals stay); False if it was unknown."""
        async with self._write() as db:
            await db.execute("DELETE FROM outbox WHERE session_key = ?", (key,))
            deleted = await db.execute("DELETE FROM sessions WHERE key = ?", (key,))
        await self._scrub()
        return deleted.rowcount > 0

    @abstractmethod
    async def _scrub(self) -> None:
        """Make deleted rows leave the database's bytes as far as the back end can."""
