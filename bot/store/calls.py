"""The tool-call half of `Store`'s interface: save, load, orphan, deliver, and where calls are shown."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from datetime import datetime

from bot.clock import utcnow
from bot.store.base import Queries
from bot.store.db import Db, fetching
from bot.store.schema import CALL_COLUMNS, call_from_row, call_to_row, ts
from bot.toolcall import CallStatus, ToolCall

ORPHANED_ERROR = "the process that ran this call stopped"
_OPEN = "('pending', 'running')"  # the statuses a call may still leave
# A call waiting for an approver runs nothing: a restart leaves it waiting, for whoever takes it up.
_NOT_ASKED = "NOT (status = 'pending' AND decision = 'asked')"
_CALL_COLUMNS = ", ".join(CALL_COLUMNS)
_PROGRESS = CALL_COLUMNS.index("progress")
_SELECT_CALLS = f"SELECT {_CALL_COLUMNS} FROM tool_calls"
# Only a call that is still open takes every field (and the replica saving it); `delivered` never goes back to 0,
# so a stale in-memory copy cannot make a result be delivered twice.
_UPSERT_CALL = f"""
INSERT INTO tool_calls ({_CALL_COLUMNS}, replica) VALUES ({", ".join("?" * (len(CALL_COLUMNS) + 1))})
ON CONFLICT(id) DO UPDATE SET
    session_key = excluded.session_key, turn_id = excluded.turn_id, tool_name = excluded.tool_name,
    input = excluded.input, parent_id = excluded.parent_id, status = excluded.status,
    created_at = excluded.created_at, started_at = excluded.started_at,
    completed_at = excluded.completed_at, result = excluded.result, error = excluded.error,
    timed_out = excluded.timed_out, cancelled_by = excluded.cancelled_by,
    delivered = CASE WHEN excluded.delivered = 1 THEN 1 ELSE tool_calls.delivered END,
    progress = excluded.progress, replica = excluded.replica, requester = excluded.requester,
    decision = excluded.decision, decided_by = excluded.decided_by, approvers = excluded.approvers
WHERE tool_calls.status IN {_OPEN}
"""
# A final row keeps its outcome; a copy with the same final status may still add progress/delivery.
_TOUCH_FINAL_CALL = f"""
UPDATE tool_calls SET delivered = CASE WHEN ? = 1 THEN 1 ELSE delivered END, progress = ?
WHERE id = ? AND status = ? AND status NOT IN {_OPEN}
"""


async def mark_delivered(db: Db, call_ids: Sequence[str]) -> None:
    """Inside the caller's transaction (`CallQueries.mark_delivered`, the save that stores the results)."""
    sql = f"UPDATE tool_calls SET delivered = 1 WHERE id = ? AND status NOT IN {_OPEN}"
    await db.executemany(sql, [(call_id,) for call_id in call_ids])


class CallQueries(Queries):
    """Tool calls in the store. A final row keeps its outcome: the SQL guards it, not only the caller."""

    async def save_call(self, call: ToolCall) -> None:
        """Upsert a call; a final row keeps its status and outcome (only delivery and progress may change)."""
        await self.save_calls([call])

    async def save_calls(self, calls: Sequence[ToolCall]) -> None:
        """`save_call` for many calls in one transaction: a thousand busy calls cost one commit, not a thousand.

        Each open row saved records this store's replica (None with SQLite): the one running the call."""
        rows = [call_to_row(call) for call in calls]
        touches = [  # only a final copy can touch a final row: an open one's touch would match nothing
            (int(call.delivered), row[_PROGRESS], call.id, call.status.value)
            for call, row in zip(calls, rows, strict=True)
            if call.is_final
        ]

        async def body(db: Db) -> None:
            for key in sorted({call.session_key for call in calls}):  # sorted: two writers lock in one order
                await self._lock_session_for_insert(db, key)  # the upsert names the session
            await db.executemany(_UPSERT_CALL, [(*row, self.replica) for row in rows])
            await db.executemany(_TOUCH_FINAL_CALL, touches)

        await self._transact(body)

    async def load_call(self, call_id: str) -> ToolCall | None:
        rows = await self._query(fetching(f"{_SELECT_CALLS} WHERE id = ?", call_id))
        return call_from_row(rows[0]) if rows else None

    async def session_calls(self, key: str, *, only_open: bool = False) -> list[ToolCall]:
        """The session's calls, oldest first; with `only_open`, just those still pending or running."""
        where = f" AND status IN {_OPEN}" if only_open else ""
        order = self.dialect.row_order
        rows = await self._query(
            fetching(f"{_SELECT_CALLS} WHERE session_key = ?{where} ORDER BY created_at, {order}", key)
        )
        return [call_from_row(row) for row in rows]

    async def orphan_open_calls(self, replicas: Sequence[str] | None = None) -> list[ToolCall]:
        """Calls their process left open become `orphaned`; returns them as updated.

        `replicas` None: every open call (a lone SQLite daemon at start-up: any open call is a previous
        process's). Otherwise only calls saved by one of these replicas (the ones found dead)."""
        if replicas is not None and not replicas:
            return []
        only = f" AND replica IN ({', '.join('?' * len(replicas))})" if replicas is not None else ""
        sql = "UPDATE tool_calls SET status = ?, completed_at = ?, error = ?"
        sql += f" WHERE status IN {_OPEN} AND {_NOT_ASKED}{only}"
        params = (CallStatus.ORPHANED.value, ts(utcnow()), ORPHANED_ERROR, *(replicas or ()))
        rows = await self._transact(fetching(f"{sql} RETURNING {_CALL_COLUMNS}", *params))
        return sorted((call_from_row(row) for row in rows), key=lambda call: call.created_at)

    async def audit_calls(
        self, *, since: datetime | None = None, requester: str | None = None, tool: str | None = None
    ) -> list[ToolCall]:
        """Calls for the audit trail, oldest first; `tool` may be a glob (`mcp__github__*`)."""
        where, params = ["1 = 1"], []
        if since is not None:
            where.append("created_at >= ?")
            params.append(ts(since))
        if requester is not None:
            where.append("requester = ?")
            params.append(requester)
        order = self.dialect.row_order
        sql = f"{_SELECT_CALLS} WHERE {' AND '.join(where)} ORDER BY created_at, {order}"
        rows = await self._query(fetching(sql, *params))
        calls = [call_from_row(row) for row in rows]
        return [call for call in calls if tool is None or fnmatch.fnmatchcase(call.tool_name, tool)]

    async def adopt_asked_calls(self, replicas: Sequence[str] | None = None) -> list[ToolCall]:
        """Calls left waiting for an approval become this store's replica's, to wait for it here.

        `replicas` as for `orphan_open_calls`: None takes every one (a lone daemon at start-up)."""
        if replicas is not None and not replicas:
            return []
        only = f" AND replica IN ({', '.join('?' * len(replicas))})" if replicas is not None else ""
        sql = f"UPDATE tool_calls SET replica = ? WHERE NOT {_NOT_ASKED}{only} RETURNING {_CALL_COLUMNS}"
        rows = await self._transact(fetching(sql, self.replica, *(replicas or ())))
        return sorted((call_from_row(row) for row in rows), key=lambda call: call.created_at)

    async def mark_delivered(self, call_ids: Sequence[str]) -> None:
        """Record that these calls' results reached the model; only final calls can be delivered."""
        if not call_ids:
            return

        async def body(db: Db) -> None:
            await mark_delivered(db, call_ids)

        await self._transact(body)

    async def set_call_display(self, call_ids: Sequence[str], place: str) -> None:
        """Record that an edge shows these calls at `place` (its own reference, e.g. a Slack message)."""

        async def body(db: Db) -> None:
            await db.executemany(
                "INSERT INTO call_displays (call_id, place) VALUES (?, ?)"
                " ON CONFLICT(call_id) DO UPDATE SET place = excluded.place",
                [(call_id, place) for call_id in call_ids],
            )

        await self._transact(body)

    async def displays_of(self, call_ids: Sequence[str]) -> dict[str, list[ToolCall]]:
        """The places showing any of these calls, each with every call shown there (oldest first)."""
        if not call_ids:
            return {}
        marks = ", ".join("?" * len(call_ids))
        columns = ", ".join(f"c.{column}" for column in CALL_COLUMNS)
        sql = (
            f"SELECT shown.place, {columns} FROM call_displays AS asked "
            "JOIN call_displays AS shown ON shown.place = asked.place "
            "JOIN tool_calls AS c ON c.id = shown.call_id "
            f"WHERE asked.call_id IN ({marks}) ORDER BY c.created_at, c.{self.dialect.row_order}"
        )
        rows = await self._query(fetching(sql, *call_ids))
        places: dict[str, dict[str, ToolCall]] = {}
        for row in rows:
            call = call_from_row(row)
            places.setdefault(row["place"], {})[call.id] = call
        return {place: list(calls.values()) for place, calls in places.items()}

    async def undelivered_calls(self, key: str) -> list[ToolCall]:
        """Final calls of the session whose result the model has not been given yet, oldest first."""
        sql = f"{_SELECT_CALLS} WHERE session_key = ? AND status NOT IN {_OPEN} AND delivered = 0"
        rows = await self._query(fetching(f"{sql} ORDER BY created_at, {self.dialect.row_order}", key))
        return [call_from_row(row) for row in rows]
