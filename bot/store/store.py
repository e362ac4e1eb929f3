"""The store: the daemon's source of truth for anything that must survive a restart.

`Store` is the intent-level interface (claim an event, append messages, save a call) and the
queries behind it, written once against the `Db` seam (bot/store/db.py). Two back ends provide
the connection and the transaction discipline: `SqliteStore` (bot/store/sqlite.py, one file,
the default) and `PostgresStore` (bot/store/postgres.py, several replicas). No SQL leaves this
package; `open_store` (bot/store/opening.py) picks the back end from the settings.

Every write method runs in one transaction, so it is all-or-nothing and durable when it returns.
A write that reads a session's rows before changing them first locks the session's row
(`Queries._require_session`), so two replicas writing one session never interleave.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.clock import utcnow
from bot.store.calls import CallQueries, mark_delivered
from bot.store.db import Db, Row, executing, fetching
from bot.store.feedback import FeedbackQueries
from bot.store.forgetting import ForgetQueries
from bot.store.inbox import InboxQueries, mark_answered, mark_stored
from bot.store.open_work import OpenWorkQueries
from bot.store.outbox import OutboxQueries, owe_posts
from bot.store.processes import ProcessQueries
from bot.store.reminders import ReminderQueries
from bot.store.schema import dumps, ts
from bot.store.usage import UsageQueries
from bot.types import OwedPost

_APPEND = (
    "INSERT INTO messages (session_key, seq, role, body, created_at)"
    " SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ? FROM messages WHERE session_key = ?"
)
"""One message after the session's last: its seq is found by the insert itself (the primary key's index), not
by a query of its own; a session's appends never interleave (one writer in SQLite, its row locked in PostgreSQL)."""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A conversation, named by an edge-neutral key; `address` is the edge's routing info."""

    key: str
    created_at: datetime
    address: dict[str, Any]
    turn_count: int

    @property
    def person(self) -> str | None:
        """Whom the session's turns are for: who spoke in it last, else who started it (an edge's user id)."""
        person = self.address.get("speaker") or self.address.get("requester")
        return person if isinstance(person, str) else None


def _session(row: Row) -> SessionRecord:
    return SessionRecord(
        key=row["key"],
        created_at=datetime.fromisoformat(row["created_at"]),
        address=json.loads(row["address"]),
        turn_count=int(row["turn_count"]),
    )


class Store(
    CallQueries,
    ProcessQueries,
    ReminderQueries,
    InboxQueries,
    OutboxQueries,
    UsageQueries,
    FeedbackQueries,
    ForgetQueries,
    OpenWorkQueries,
):
    """Sessions, their messages and seen events; tool calls and their processes, reminders,
    the inbox, the Slack outbox, token usage and the answers' ratings come from mixins.

    `replica` names the process writing (cluster mode) and is recorded with each call it saves; None with SQLite.
    """

    @abstractmethod
    async def close(self) -> None: ...

    # --- events -------------------------------------------------------------------------

    async def claim_event(self, *keys: str) -> bool:
        """True the first time every one of these keys is seen (each is recorded, in one transaction):
        how a redelivered Slack event, or a second event for the same message, is dropped."""
        now = ts(utcnow())

        async def body(db: Db) -> int:
            new = 0
            for key in sorted(keys):  # one order for every claimer: two replicas never deadlock
                sql = "INSERT INTO seen_events (key, seen_at) VALUES (?, ?) ON CONFLICT DO NOTHING"
                new += (await db.execute(sql, (key, now))).rowcount
            return new

        return await self._transact(body) == len(keys)

    async def prune_events(self, older_than: datetime) -> int:
        """Forget events seen before `older_than` (redeliveries stop long before); returns how many."""
        return (await self._transact(executing("DELETE FROM seen_events WHERE seen_at < ?", ts(older_than)))).rowcount

    # --- sessions -----------------------------------------------------------------------

    async def ensure_session(self, key: str, address: dict[str, Any] | None = None) -> SessionRecord:
        """The session for `key`, created with `address` if missing; an existing one is left unchanged."""

        async def body(db: Db) -> SessionRecord:
            await db.execute(
                "INSERT INTO sessions (key, created_at, address) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (key, ts(utcnow()), dumps(address or {})),
            )
            rows = await db.fetch("SELECT * FROM sessions WHERE key = ?", key)
            return _session(rows[0])

        return await self._transact(body)

    async def get_session(self, key: str) -> SessionRecord | None:
        rows = await self._query(fetching("SELECT * FROM sessions WHERE key = ?", key))
        return _session(rows[0]) if rows else None

    async def update_address(self, key: str, address: dict[str, Any]) -> None:
        """Merge `address` into the stored one (new keys win); KeyError if the session is unknown."""

        async def body(db: Db) -> None:
            rows = await db.fetch(f"SELECT address FROM sessions WHERE key = ?{db.dialect.lock_row}", key)
            if not rows:
                raise KeyError(f"no session {key!r}")
            merged = {**json.loads(rows[0]["address"]), **address}
            await db.execute("UPDATE sessions SET address = ? WHERE key = ?", (dumps(merged), key))

        await self._transact(body)

    async def next_turn(self, key: str) -> int:
        """Count a new turn and return its number (1, 2, …), creating the session (no address) if missing.

        One statement, so a turn's start is one commit, and atomic: concurrent turns never share a number."""
        sql = (
            "INSERT INTO sessions (key, created_at, address, turn_count) VALUES (?, ?, '{}', 1)"
            " ON CONFLICT(key) DO UPDATE SET turn_count = sessions.turn_count + 1 RETURNING turn_count"
        )
        rows = await self._transact(fetching(sql, key, ts(utcnow())))
        return int(rows[0][0])

    async def add_alias(self, alias: str, key: str) -> None:
        """Give session `key` another name; idempotent. ValueError if `alias` already names another session."""

        async def body(db: Db) -> None:
            await self._require_session(db, key)
            if alias != key and await db.fetch("SELECT 1 FROM sessions WHERE key = ?", alias):
                raise ValueError(f"{alias!r} is already a session key")
            rows = await db.fetch("SELECT session_key FROM session_aliases WHERE alias = ?", alias)
            if rows and rows[0][0] != key:
                raise ValueError(f"alias {alias!r} already names session {rows[0][0]!r}")
            if alias != key:
                await db.execute(
                    "INSERT INTO session_aliases (alias, session_key) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    (alias, key),
                )

        await self._transact(body)

    async def resolve(self, key_or_alias: str) -> str | None:
        """The session key a key or alias names, None if it names nothing."""

        async def body(db: Db) -> list[Row]:
            rows = await db.fetch("SELECT key FROM sessions WHERE key = ?", key_or_alias)
            return rows or await db.fetch("SELECT session_key FROM session_aliases WHERE alias = ?", key_or_alias)

        rows = await self._query(body)
        return str(rows[0][0]) if rows else None

    # --- conversation -------------------------------------------------------------------

    async def load_messages(self, key: str) -> list[dict[str, Any]]:
        """The session's messages in the order they were appended."""
        rows = await self._query(fetching("SELECT body FROM messages WHERE session_key = ? ORDER BY seq", key))
        return [json.loads(row[0]) for row in rows]

    async def replace_messages(self, key: str, messages: Sequence[dict[str, Any]]) -> None:
        """Make `messages` the session's whole history, in one transaction.

        A stored message the new history no longer holds as it was (stubbed, summarised away) moves to the
        archive once; one that is kept keeps its row's time, so the archive never holds a copy of it.
        """
        now = ts(utcnow())
        bodies = [(str(message["role"]), dumps(message)) for message in messages]
        kept = {text for _, text in bodies}

        async def body(db: Db) -> None:
            await self._require_session(db, key)
            old = await db.fetch("SELECT role, body, created_at FROM messages WHERE session_key = ?", key)
            await db.executemany(
                "INSERT INTO messages_archive (session_key, role, body, created_at, archived_at)"
                " VALUES (?, ?, ?, ?, ?)",
                [(key, row[0], row[1], row[2], now) for row in old if row[1] not in kept],
            )
            created = {row[1]: row[2] for row in old}
            await db.execute("DELETE FROM messages WHERE session_key = ?", (key,))
            await db.executemany(
                "INSERT INTO messages (session_key, seq, role, body, created_at) VALUES (?, ?, ?, ?, ?)",
                [(key, i + 1, role, text, created.get(text, now)) for i, (role, text) in enumerate(bodies)],
            )

        await self._transact(body)

    async def append_messages(
        self,
        key: str,
        messages: Sequence[dict[str, Any]],
        *,
        inbox_ids: Sequence[int] = (),
        turn_id: str | None = None,
        answered: bool = False,
        owed: Sequence[OwedPost] = (),
        delivered: Sequence[str] = (),
    ) -> list[int]:
        """Append in order, all or nothing; KeyError if the session is unknown.

        `inbox_ids` name the inbox rows whose text these messages carry: they are marked stored by
        `turn_id` in the same transaction. `answered` closes the turn: the session's stored rows are answered.
        `owed` are posts the edge has yet to deliver (the answer, a notice): owed in the outbox in the same
        transaction, so a message is never answered in the store and unsaid in Slack. Returns their ids.
        `delivered` names the calls whose results these messages carry: delivered in the same transaction.
        """
        if not messages and not inbox_ids and not answered and not owed and not delivered:
            return []
        if inbox_ids and turn_id is None:
            raise ValueError("inbox rows are stored by a turn: pass its turn_id")
        now = ts(utcnow())
        rows = [(key, str(message["role"]), dumps(message), now, key) for message in messages]

        async def body(db: Db) -> list[int]:
            if rows:  # the insert names the session
                await self._lock_session_for_insert(db, key)
            else:
                await self._require_session(db, key)
            await db.executemany(_APPEND, rows)
            if inbox_ids and turn_id is not None:
                await mark_stored(db, inbox_ids, turn_id)
            if answered:
                await mark_answered(db, key)
            if delivered:
                await mark_delivered(db, delivered)
            return await owe_posts(db, owed, self.replica)

        return await self._transact(body)
