"""The SQLite store: one database file in WAL mode, the default back end.

The file is reached through ONE aiosqlite connection, in autocommit mode. aiosqlite runs the functions
it is handed one after the other on a single worker thread, and every store method is one such function:
a write (`_transact`) runs its whole body there, BEGIN IMMEDIATE to COMMIT (or ROLLBACK), and a read
(`_query`) its statements, as one hop. So no method's statements can interleave with another's, a read
never sees another method's uncommitted rows, and the store needs no lock of its own: the worker's queue
is the order. The checkpoint of `_scrub` and the close are single functions on that queue too, run after
everything queued before them. A hop costs more CPU, on both threads, than the statement it carries,
so a method is one hop however many statements it runs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import suppress
from pathlib import Path
from typing import cast

import aiosqlite

from bot.errors import StoreError
from bot.store.db import SQLITE, Body, SqliteDb, T, fetching, run_to_end
from bot.store.modes import private_dir, private_file, tighten
from bot.store.schema import migrate
from bot.store.store import Store

BUSY_TIMEOUT_MS = 5_000


class SqliteStore(Store):
    """The store on one SQLite file: one writer at a time, so it has no replica and needs no fencing."""

    dialect = SQLITE

    def __init__(self, db: aiosqlite.Connection, path: Path) -> None:
        self._conn = db
        self.path = path

    @classmethod
    async def open(cls, path: Path) -> SqliteStore:
        """Open (creating if needed) and migrate the database; StoreError if that cannot be done."""
        try:
            private_dir(path.parent)
            private_file(path)
            db = await aiosqlite.connect(path, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open database at {path}: {exc}") from exc
        try:
            db.row_factory = sqlite3.Row
            await db.execute("PRAGMA journal_mode=WAL")
            await db.execute("PRAGMA synchronous=NORMAL")
            await db.execute("PRAGMA foreign_keys=ON")
            await db.execute("PRAGMA secure_delete=ON")  # a deleted row's bytes are overwritten, not left free
            await db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            await migrate(db)
            tighten(path)  # the -wal and -shm exist by now; an older install may have left them 0644
        except BaseException as exc:
            await db.close()
            if isinstance(exc, sqlite3.Error | StoreError):
                raise StoreError(f"cannot open database at {path}: {exc}") from exc
            raise
        return cls(db, path)

    async def _scrub(self) -> None:
        """Copy the WAL back into the file and empty it: until then a deleted text's old pages sit in `-wal`."""
        await self._query(fetching("PRAGMA wal_checkpoint(TRUNCATE)"))  # its row read: the statement is done

    async def close(self) -> None:
        await self._conn.close()

    async def _transact(self, body: Body[T]) -> T:
        """`body` in one transaction, run whole on the worker thread: one hop, however many statements.

        A caller cancelled while it waits gets CancelledError, and the transaction still runs whole,
        committed or rolled back, before anything queued after it; it is never half-applied."""
        return await self._on_thread(self._run, body)

    async def _query(self, body: Body[T]) -> T:
        """`body`'s reads, run whole on the worker thread: one hop; no write runs between its statements."""
        return await self._on_thread(self._read, body)

    async def _on_thread(self, run: Callable[[Body[T]], T], body: Body[T]) -> T:
        # aiosqlite queues functions for its thread through `_execute` (how its own methods reach it);
        # it has no public way to run one.
        execute = cast(Callable[..., Awaitable[T]], self._conn._execute)
        return await execute(run, body)

    def _run(self, body: Body[T]) -> T:
        """On the worker thread: BEGIN IMMEDIATE, the body's statements, COMMIT; ROLLBACK if anything raises."""
        conn = self._conn._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = run_to_end(body(SqliteDb(conn)))
            conn.execute("COMMIT")
        except BaseException as exc:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.IntegrityError) and "FOREIGN KEY" in str(exc):
                raise KeyError(f"the write names a session or call that is not stored ({exc})") from exc
            raise
        return result

    def _read(self, body: Body[T]) -> T:
        """On the worker thread: the body's statements, each in SQLite's own implicit transaction."""
        return run_to_end(body(SqliteDb(self._conn._conn)))
