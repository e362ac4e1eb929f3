"""A person's open work, as the store knows it: what an App Home shows them.

Everything is read from the rows, never from a process's memory, so the answer is the same on
every replica and after a restart: the calls they asked for that are still open (an approval that
waits is one of them), the waits and reminders they set that are still pending, and the threads
they asked in lately with what each is doing. Mixed into `Store` like the other queries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from bot.store.base import Queries
from bot.store.db import fetching
from bot.store.reminders import _COLUMNS as _REMINDER_COLUMNS
from bot.store.reminders import Reminder, _reminder
from bot.store.schema import CALL_COLUMNS, call_from_row, ts
from bot.toolcall import ToolCall

_OPEN = "('pending', 'running')"


class ThreadState(StrEnum):
    """What a thread is doing, from its rows: a call or an unanswered message is work under way."""

    WORKING = "working"
    WAITING = "waiting"
    """Nothing runs, but a wait of the agent is pending: it comes back by itself."""
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """One of a person's threads: its session, the edge's address, when it last moved, and its state."""

    session_key: str
    address: dict[str, Any]
    last_active: datetime
    state: ThreadState


class OpenWorkQueries(Queries):
    async def open_calls_of(self, person: str) -> list[ToolCall]:
        """The calls `person` asked for that are still pending or running (approvals waiting too), oldest first."""
        columns = ", ".join(CALL_COLUMNS)
        sql = f"SELECT {columns} FROM tool_calls WHERE requester = ? AND status IN {_OPEN}"
        rows = await self._query(fetching(f"{sql} ORDER BY created_at, {self.dialect.row_order}", person))
        return [call_from_row(row) for row in rows]

    async def pending_reminders_of(self, person: str) -> list[Reminder]:
        """The waits and reminders `person` set that are still pending, soonest first."""
        sql = f"SELECT {_REMINDER_COLUMNS} FROM reminders WHERE requester = ? AND status = 'pending'"
        sql += " ORDER BY due_at, id"
        rows = await self._query(fetching(sql, person))
        return [_reminder(row) for row in rows]

    async def recent_threads_of(self, person: str, *, limit: int) -> list[ThreadSummary]:
        """The `limit` threads `person` started or spoke in last, the most recently active first."""
        requester = self.dialect.json_field.format(doc="s.address", name="requester")
        speaker = self.dialect.json_field.format(doc="s.address", name="speaker")
        sql = (
            "SELECT s.key, s.address, COALESCE((SELECT MAX(m.created_at) FROM messages m"
            " WHERE m.session_key = s.key), s.created_at) AS active,"
            f" (SELECT COUNT(*) FROM tool_calls c WHERE c.session_key = s.key AND c.status IN {_OPEN}) AS calls,"
            " (SELECT COUNT(*) FROM inbox i WHERE i.session_key = s.key AND i.answered_at IS NULL) AS unanswered,"
            " (SELECT COUNT(*) FROM reminders r WHERE r.session_key = s.key AND r.kind = 'wake'"
            " AND r.status = 'pending') AS waits"
            f" FROM sessions s WHERE {requester} = ? OR {speaker} = ?"
            " ORDER BY active DESC LIMIT ?"
        )
        rows = await self._query(fetching(sql, person, person, limit))
        return [
            ThreadSummary(
                session_key=str(row[0]),
                address=json.loads(row[1]),
                last_active=datetime.fromisoformat(str(row[2])),
                state=_state(int(row[3]) + int(row[4]), int(row[5])),
            )
            for row in rows
        ]

    async def model_calls_since(self, since: datetime, *, requester: str) -> int:
        """How many model calls were booked to `requester` since `since`."""
        sql = "SELECT COUNT(*) FROM model_usage WHERE at >= ? AND requester = ?"
        rows = await self._query(fetching(sql, ts(since), requester))
        return int(rows[0][0])


def _state(busy: int, waits: int) -> ThreadState:
    if busy:
        return ThreadState.WORKING
    return ThreadState.WAITING if waits else ThreadState.IDLE
