"""Forgetting: a session's stored data deleted on request (`forget`) or once it has been idle too long.

What goes is everything that holds the conversation's text: the session row and, through its foreign
keys, its aliases, messages, archive, tool calls (with their displays and process groups), reminders
(with their owed posts) and inbox rows; the outbox has no foreign key and is deleted by hand. What
stays is `model_usage`: token totals, which name the session but hold none of its text.

A session is idle since its newest trace: the last message appended, inbox row claimed or call
created, or its creation when it has none. No column of its own is needed for that.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

from bot.store.db import Db
from bot.store.schema import dumps, ts

REDACTED = "[a message deleted in Slack]"

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

    async def redact_text(self, key: str, text: str) -> int:
        """Replace every occurrence of `text` in the session's messages, archive and inbox with `REDACTED`
        (a message deleted in Slack); returns how many rows changed. Unknown sessions change nothing."""
        if not text.strip():
            return 0
        changed = 0
        escaped = dumps(text)[1:-1]  # how the text reads inside a stored JSON body
        async with self._write() as db:
            for table, column, ident in (("messages", "body", "seq"), ("messages_archive", "body", "id")):
                rows = await db.fetch(f"SELECT {ident}, {column} FROM {table} WHERE session_key = ?", key)
                for row in rows:
                    if escaped in row[1]:
                        body = dumps(_redacted(json.loads(row[1]), text))
                        sql = f"UPDATE {table} SET {column} = ? WHERE session_key = ? AND {ident} = ?"
                        await db.execute(sql, (body, key, row[0]))
                        changed += 1
            rows = await db.fetch("SELECT id, text, blocks FROM inbox WHERE session_key = ?", key)
            for row in rows:
                if text in row[1] or (row[2] is not None and escaped in row[2]):
                    blocks = None if row[2] is None else dumps(_redacted(json.loads(row[2]), text))
                    sql = "UPDATE inbox SET text = ?, blocks = ? WHERE id = ?"
                    await db.execute(sql, (row[1].replace(text, REDACTED), blocks, row[0]))
                    changed += 1
        if changed:
            await self._scrub()
        return changed

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


def _redacted(value: Any, text: str) -> Any:
    """`value` (parsed JSON) with `text` replaced in every string it holds."""
    if isinstance(value, str):
        return value.replace(text, REDACTED)
    if isinstance(value, list):
        return [_redacted(item, text) for item in value]
    if isinstance(value, dict):
        return {name: _redacted(item, text) for name, item in value.items()}
    return value
