"""Forgetting: a session's stored data deleted on request (`forget`) or once it has been idle too long.

What goes is everything that holds the conversation's text: the session row and, through its foreign
keys, its aliases, messages, archive, tool calls (with their displays and process groups), reminders
(with their owed posts) and inbox rows; the outbox has no foreign key and is deleted by hand. What
stays is `model_usage`: token totals, which name the session but hold none of its text.

A session is idle since its newest trace: the last message appended, inbox row claimed or call
created, or its creation when it has none. No column of its own is needed for that.

A message deleted in Slack goes on its own: found by the ts its attributed form carries, its words are
replaced wherever the session stored them and the files it carried are left out; the rest stays.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.agent.fence import said_at, unsay, without_files_of
from bot.store.base import Queries
from bot.store.db import Db, fetching
from bot.store.schema import dumps, ts
from tools.sandbox import forget_files

if TYPE_CHECKING:
    from bot.store.store import Store

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


class ForgetQueries(Queries):
    async def idle_sessions(self, since: datetime, *, prefix: str = "") -> list[str]:
        """Keys (starting with `prefix`) of sessions with no trace since `since` and no pending wait or reminder:
        a reminder still to come is a promise, and its session is not idle."""
        moment = ts(since)
        rows = await self._query(fetching(_LAST_SEEN, f"{prefix}%", moment, moment, moment, moment))
        return [str(row[0]) for row in rows]

    async def redact_message(self, key: str, message_ts: str) -> int:
        """Replace what the message posted at `message_ts` said with `REDACTED` in the session's messages,
        archive and inbox (a message deleted in Slack); returns how many rows changed. Unknown sessions and
        messages change nothing. The message is found by the ts its attributed form carries (`said`), so its
        text is gone whatever characters it held; the files it carried go with it."""
        if not message_ts:
            return 0
        marker = said_at(message_ts)
        in_json = dumps(marker)[1:-1]  # how the marker reads inside a stored JSON body

        async def body(db: Db) -> int:
            changed = 0
            for table, ident in (("messages", "seq"), ("messages_archive", "id")):
                rows = await db.fetch(f"SELECT {ident}, body FROM {table} WHERE session_key = ?", key)
                for row in rows:
                    if in_json in row[1]:
                        body = dumps(_redacted(json.loads(row[1]), message_ts))
                        sql = f"UPDATE {table} SET body = ? WHERE session_key = ? AND {ident} = ?"
                        await db.execute(sql, (body, key, row[0]))
                        changed += 1
            rows = await db.fetch("SELECT id, text, blocks FROM inbox WHERE session_key = ?", key)
            for row in rows:
                if marker in row[1] or (row[2] is not None and in_json in row[2]):
                    blocks = None if row[2] is None else dumps(_redacted(json.loads(row[2]), message_ts))
                    sql = "UPDATE inbox SET text = ?, blocks = ? WHERE id = ?"
                    await db.execute(sql, (unsay(row[1], message_ts, REDACTED), blocks, row[0]))
                    changed += 1
            return changed

        changed = await self._transact(body)
        if changed:
            await self._scrub()
        return changed

    async def forget_session(self, key: str) -> bool:
        """Delete the session and everything holding its text (token totals stay); False if it was unknown."""

        async def body(db: Db) -> bool:
            await db.execute("DELETE FROM outbox WHERE session_key = ?", (key,))
            return (await db.execute("DELETE FROM sessions WHERE key = ?", (key,))).rowcount > 0

        known = await self._transact(body)
        await self._scrub()
        return known

    @abstractmethod
    async def _scrub(self) -> None:
        """Make deleted rows leave the database's bytes as far as the back end can."""


@dataclass(frozen=True, slots=True)
class Forgetting:
    """Forgetting one session, the one way both retention and a `forget` reply do it.

    A session's text lives in two places, the store's rows and the work dir its commands wrote in, and the
    two callers must not drift apart: a place a session comes to keep text in is added here once, and
    neither of them can forget a thread's rows and leave its files behind (or the other way round)."""

    store: Store
    work_root: Path

    async def forget(self, key: str) -> bool:
        """Delete the session's rows (token totals stay) and its commands' files; False if no row was left.
        The files go either way: a session forgotten halfway (a crash between the two) is finished here."""
        known = await self.store.forget_session(key)
        forget_files(self.work_root, key)
        return known


def _redacted(value: Any, message_ts: str) -> Any:
    """`value` (parsed JSON) with the message posted at `message_ts` unsaid in every string it holds, and
    the files it carried left out of every list of content blocks."""
    if isinstance(value, str):
        return unsay(value, message_ts, REDACTED)
    if isinstance(value, list):
        return [_redacted(item, message_ts) for item in without_files_of(value, message_ts)]
    if isinstance(value, dict):
        return {name: _redacted(item, message_ts) for name, item in value.items()}
    return value
