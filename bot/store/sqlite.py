"""The SQLite store: one database file in WAL mode, the default back end.

The file is reached through ONE aiosqlite connection. aiosqlite runs every statement
on a single worker thread, and an `asyncio.Lock` around each method keeps one method's
statements (and its transaction) from interleaving with another's, so hundreds of
concurrent sessions can write without losing rows. The connection is in autocommit
mode; every write method opens its own `BEGIN IMMEDIATE … COMMIT`.

A write through `_transact` is one hop to that thread, not one per statement: its whole body,
BEGIN to COMMIT, runs there as one function on the sqlite3 connection (a hop costs more CPU,
on both threads, than the statement it carries).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import cast

import aiosqlite

from bot.errors import StoreError
from bot.store.db import Body, Db, SqliteDb, SqliteThreadDb, T, run_to_end
from bot.store.modes import private_dir, private_file, tighten
from bot.store.schema import migrate
from bot.store.store import Store

BUSY_TIMEOUT_MS = 5_000


class SqliteStore(Store):
    """The store on one SQLite file: one writer at a time, so it has no replica and needs no fencing."""

    def __init__(self, db: aiosqlite.Connection, path: Path) -> None:
        self._conn = db
        self._db = SqliteDb(db)
        self._lock = asyncio.Lock()
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
        async with self._lock:
            await self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    async def close(self) -> None:
        async with self._lock:
            await self._conn.close()

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[Db]:
        """Reads take the lock too, so they never see another method's uncommitted rows."""
        async with self._lock:
            yield self._db

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[Db]:
        """Statements queued on the single worker run in order.

        A caller cancelled mid-write gets CancelledError and the write is rolled back, unless
        the COMMIT was already on its way, in which case it stands; it is never half-applied.
        """
        async with self._lock:
            try:
                # Inside the try: a cancelled await still runs its statement on the worker,
                # so even a BEGIN we stopped waiting for must be rolled back before the lock goes.
                await self._conn.execute("BEGIN IMMEDIATE")
                yield self._db
                await self._conn.execute("COMMIT")
            except BaseException:
                with suppress(sqlite3.Error):
                    await self._conn.execute("ROLLBACK")
                raise

    async def _transact(self, body: Body[T]) -> T:
        """`body` in one transaction, run whole on the worker thread: one hop, however many statements.

        A caller cancelled while it waits gets CancelledError, and the transaction still runs whole,
        committed or rolled back, before anything queued after it; it is never half-applied."""
        # aiosqlite queues functions for its thread through `_execute` (how its own methods reach it);
        # it has no public way to run one.
        on_thread = cast(Callable[..., Awaitable[T]], self._conn._execute)
        async with self._lock:
            return await on_thread(self._run, body)

    def _run(self, body: Body[T]) -> T:
        """On the worker thread: BEGIN IMMEDIATE, the body's statements, COMMIT; ROLLBACK if anything raises."""
        conn = self._conn._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = run_to_end(body(SqliteThreadDb(conn)))
            conn.execute("COMMIT")
        except BaseException as exc:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.IntegrityError) and "FOREIGN KEY" in str(exc):
                raise KeyError(f"the write names a session or call that is not stored ({exc})") from exc
            raise
        return result
