"""What every query mixin of the store runs its SQL through: a back end's two ways to run a body.

The mixins (calls, inbox, reminders, …) and `Store` itself write each method as a body, one coroutine
over a `Db`, and hand it to `_transact` (a write: one transaction, all-or-nothing) or `_query` (a read of
committed rows). Each back end runs a body its own way (bot/store/sqlite.py, bot/store/postgres.py); the
queries never see a connection, a lock or a thread.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from bot.store.db import Body, Db, Dialect, T


class Queries(ABC):
    """The back end's half of every query mixin; `replica` names the process writing (None with SQLite)."""

    replica: str | None = None
    dialect: Dialect
    """The back end's SQL fragments, for a query built before its body runs (`Db.dialect` inside one)."""

    @abstractmethod
    async def _transact(self, body: Body[T]) -> T:
        """`body` in one write transaction, all-or-nothing; a caller cancelled while it waits leaves the write
        committed or rolled back, never half-applied."""

    @abstractmethod
    async def _query(self, body: Body[T]) -> T:
        """`body` over committed rows only, with no transaction of its own to commit."""

    @staticmethod
    async def _require_session(db: Db, key: str) -> None:
        """KeyError if the session is unknown; else its row stays locked until the write ends (PostgreSQL)."""
        if not await db.fetch(f"SELECT 1 FROM sessions WHERE key = ?{db.dialect.lock_row}", key):
            raise KeyError(f"no session {key!r}")

    @staticmethod
    async def _lock_session_for_insert(db: Db, key: str) -> None:
        """`_require_session` before inserting rows whose foreign key names the session. Where there is no row
        to lock (SQLite) the schema's check is enough: the insert fails, and `_transact` makes that a KeyError."""
        if db.dialect.lock_row:
            await Queries._require_session(db, key)
