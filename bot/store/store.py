"""The SQLite store: the daemon's source of truth for anything that must survive a restart.

One database file in WAL mode, reached through ONE aiosqlite connection. aiosqlite
runs every statement on a single worker thread, and an `asyncio.Lock` around each
method keeps one method's statements (and its transaction) from interleaving with
another's, so hundreds of concurrent sessions can write without losing rows.
The connection is in autocommit mode; every write method opens its own
`BEGIN IMMEDIATE … COMMIT`, so it is all-or-nothing and durable when it returns.

The interface speaks in intents (claim an event, append messages, save a call);
no SQL leaves this module, which is what lets another back end replace it later.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite

from bot.calls.models import utcnow
from bot.errors import StoreError
from bot.store.calls import CallQueries
from bot.store.inbox import InboxQueries, mark_answered, mark_stored
from bot.store.outbox import OutboxQueries
from bot.store.processes import ProcessQueries
from bot.store.reminder_posts import ReminderPostQueries
from bot.store.reminders import ReminderQueries
from bot.store.schema import dumps, fetch, migrate, ts
from bot.store.usage import UsageQueries

BUSY_TIMEOUT_MS = 5_000


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A conversation, named by an edge-neutral key; `address` is the edge's routing info."""

    key: str
    created_at: datetime
    address: dict[str, Any]
    turn_count: int


def _session(row: sqlite3.Row) -> SessionRecord:
    return SessionRecord(
        key=row["key"],
        created_at=datetime.fromisoformat(row["created_at"]),
        address=json.loads(row["address"]),
        turn_count=int(row["turn_count"]),
    )


class Store(
    CallQueries, ProcessQueries, ReminderQueries, ReminderPostQueries, InboxQueries, OutboxQueries, UsageQueries
):
    """Sessions, their messages and seen events; tool calls and their processes, reminders and their posts,
    the inbox, the Slack outbox and token usage come from mixins."""

    def __init__(self, db: aiosqlite.Connection, path: Path) -> None:
        self._db = db
        self._lock = asyncio.Lock()
        self.path = path

    @classmethod
    async def open(cls, path: Path) -> Store:
        """Open (creating if needed) and migrate the database; StoreError if that cannot be done."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = await aiosqlite.connect(path, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open database at {path}: {exc}") from exc
        try:
            db.row_factory = sqlite3.Row
            await db.execute("PRAGMA journal_mode=WAL")
            await db.execute("PRAGMA synchronous=NORMAL")
            await db.execute("PRAGMA foreign_keys=ON")
            await db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            await migrate(db)
        except BaseException as exc:
            await db.close()
            if isinstance(exc, sqlite3.Error | StoreError):
                raise StoreError(f"cannot open database at {path}: {exc}") from exc
            raise
        return cls(db, path)

    async def close(self) -> None:
        async with self._lock:
            await self._db.close()

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[aiosqlite.Connection]:
        """Reads take the lock too, so they never see another method's uncommitted rows."""
        async with self._lock:
            yield self._db

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One transaction, all-or-nothing; statements queued on the single worker run in order.

        A caller cancelled mid-write gets CancelledError and the write is rolled back, unless
        the COMMIT was already on its way, in which case it stands; it is never half-applied.
        """
        async with self._lock:
            try:
                # Inside the try: a cancelled await still runs its statement on the worker,
                # so even a BEGIN we stopped waiting for must be rolled back before the lock goes.
                await self._db.execute("BEGIN IMMEDIATE")
                yield self._db
                await self._db.execute("COMMIT")
            except BaseException:
                with suppress(sqlite3.Error):
                    await self._db.execute("ROLLBACK")
                raise

    @staticmethod
    async def _require_session(db: aiosqlite.Connection, key: str) -> None:
        if not await fetch(db, "SELECT 1 FROM sessions WHERE key = ?", key):
            raise KeyError(f"no session {key!r}")

    # --- events -------------------------------------------------------------------------

    async def claim_event(self, *keys: str) -> bool:
        """True the first time every one of these keys is seen (each is recorded, in one transaction):
        how a redelivered Slack event, or a second event for the same message, is dropped."""
        now = ts(utcnow())
        new = 0
        async with self._write() as db:
            for key in keys:
                cursor = await db.execute("INSERT OR IGNORE INTO seen_events (key, seen_at) VALUES (?, ?)", (key, now))
                new += cursor.rowcount
        return new == len(keys)

    async def seen_any(self, *keys: str) -> bool:
        """Whether any of these keys was claimed already: a cheap look before costly work on a likely repeat."""
        marks = ", ".join("?" * len(keys))
        async with self._read() as db:
            return bool(await fetch(db, f"SELECT 1 FROM seen_events WHERE key IN ({marks}) LIMIT 1", *keys))

    async def prune_events(self, older_than: datetime) -> int:
        """Forget events seen before `older_than` (redeliveries stop long before); returns how many."""
        async with self._write() as db:
            cursor = await db.execute("DELETE FROM seen_events WHERE seen_at < ?", (ts(older_than),))
            return cursor.rowcount

    # --- sessions -----------------------------------------------------------------------

    async def ensure_session(self, key: str, address: dict[str, Any] | None = None) -> SessionRecord:
        """The session for `key`, created with `address` if missing; an existing one is left unchanged."""
        async with self._write() as db:
            await db.execute(
                "INSERT OR IGNORE INTO sessions (key, created_at, address) VALUES (?, ?, ?)",
                (key, ts(utcnow()), dumps(address or {})),
            )
            rows = await fetch(db, "SELECT * FROM sessions WHERE key = ?", key)
            return _session(rows[0])

    async def get_session(self, key: str) -> SessionRecord | None:
        async with self._read() as db:
            rows = await fetch(db, "SELECT * FROM sessions WHERE key = ?", key)
        return _session(rows[0]) if rows else None

    async def update_address(self, key: str, address: dict[str, Any]) -> None:
        """Merge `address` into the stored one (new keys win); KeyError if the session is unknown."""
        async with self._write() as db:
            rows = await fetch(db, "SELECT address FROM sessions WHERE key = ?", key)
            if not rows:
                raise KeyError(f"no session {key!r}")
            merged = {**json.loads(rows[0]["address"]), **address}
            await db.execute("UPDATE sessions SET address = ? WHERE key = ?", (dumps(merged), key))

    async def next_turn(self, key: str) -> int:
        """Count a new turn and return its number (1, 2, …); atomic, so concurrent turns never share one."""
        async with self._write() as db:
            sql = "UPDATE sessions SET turn_count = turn_count + 1 WHERE key = ? RETURNING turn_count"
            rows = await fetch(db, sql, key)
            if not rows:
                raise KeyError(f"no session {key!r}")
            return int(rows[0][0])

    async def add_alias(self, alias: str, key: str) -> None:
        """Give session `key` another name; idempotent. ValueError if `alias` already names another session."""
        async with self._write() as db:
            await self._require_session(db, key)
            if alias != key and await fetch(db, "SELECT 1 FROM sessions WHERE key = ?", alias):
                raise ValueError(f"{alias!r} is already a session key")
            rows = await fetch(db, "SELECT session_key FROM session_aliases WHERE alias = ?", alias)
            if rows and rows[0][0] != key:
                raise ValueError(f"alias {alias!r} already names session {rows[0][0]!r}")
            if alias != key:
                await db.execute(
                    "INSERT OR IGNORE INTO session_aliases (alias, session_key) VALUES (?, ?)", (alias, key)
                )

    async def resolve(self, key_or_alias: str) -> str | None:
        """The session key a key or alias names, None if it names nothing."""
        async with self._read() as db:
            rows = await fetch(db, "SELECT key FROM sessions WHERE key = ?", key_or_alias)
            if not rows:
                rows = await fetch(db, "SELECT session_key FROM session_aliases WHERE alias = ?", key_or_alias)
        return str(rows[0][0]) if rows else None

    # --- conversation -------------------------------------------------------------------

    async def load_messages(self, key: str) -> list[dict[str, Any]]:
        """The session's messages in the order they were appended."""
        async with self._read() as db:
            rows = await fetch(db, "SELECT body FROM messages WHERE session_key = ? ORDER BY seq", key)
        return [json.loads(row[0]) for row in rows]

    async def replace_messages(self, key: str, messages: Sequence[dict[str, Any]]) -> None:
        """Make `messages` the session's whole history, in one transaction.

        A stored message the new history no longer holds as it was (stubbed, summarised away) moves to the
        archive once; one that is kept keeps its row's time, so the archive never holds a copy of it.
        """
        now = ts(utcnow())
        bodies = [(str(message["role"]), dumps(message)) for message in messages]
        async with self._write() as db:
            await self._require_session(db, key)
            old = await fetch(db, "SELECT role, body, created_at FROM messages WHERE session_key = ?", key)
            kept = {body for _, body in bodies}
            await db.executemany(
                "INSERT INTO messages_archive (session_key, role, body, created_at, archived_at)"
                " VALUES (?, ?, ?, ?, ?)",
                [(key, row[0], row[1], row[2], now) for row in old if row[1] not in kept],
            )
            created = {row[1]: row[2] for row in old}
            await db.execute("DELETE FROM messages WHERE session_key = ?", (key,))
            await db.executemany(
                "INSERT INTO messages (session_key, seq, role, body, created_at) VALUES (?, ?, ?, ?, ?)",
                [(key, i + 1, role, body, created.get(body, now)) for i, (role, body) in enumerate(bodies)],
            )

    async def message_archive(self, key: str) -> list[dict[str, Any]]:
        """Every message the session ever had, compacted away or not, in the order they were written."""
        sql = (
            "SELECT body FROM ("
            " SELECT body, created_at, 0 AS src, id AS ord FROM messages_archive WHERE session_key = ?"
            " UNION ALL SELECT body, created_at, 1, seq FROM messages WHERE session_key = ?"
            ") ORDER BY created_at, src, ord"
        )
        async with self._read() as db:
            rows = await fetch(db, sql, key, key)
        return [json.loads(row[0]) for row in rows]

    async def append_messages(
        self,
        key: str,
        messages: Sequence[dict[str, Any]],
        *,
        inbox_ids: Sequence[int] = (),
        turn_id: str | None = None,
        answered: bool = False,
    ) -> None:
        """Append in order, all or nothing; KeyError if the session is unknown.

        `inbox_ids` name the inbox rows whose text these messages carry: they are marked stored by
        `turn_id` in the same transaction. `answered` closes the turn: the session's stored rows are answered.
        """
        if not messages and not inbox_ids and not answered:
            return
        now = ts(utcnow())
        bodies = [(str(message["role"]), dumps(message)) for message in messages]
        async with self._write() as db:
            await self._require_session(db, key)
            rows = await fetch(db, "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_key = ?", key)
            first = int(rows[0][0]) + 1
            await db.executemany(
                "INSERT INTO messages (session_key, seq, role, body, created_at) VALUES (?, ?, ?, ?, ?)",
                [(key, first + i, role, body, now) for i, (role, body) in enumerate(bodies)],
            )
            if inbox_ids:
                if turn_id is None:
                    raise ValueError("inbox rows are stored by a turn: pass its turn_id")
                await mark_stored(db, inbox_ids, turn_id)
            if answered:
                await mark_answered(db, key)
