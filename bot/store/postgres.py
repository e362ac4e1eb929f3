"""The PostgreSQL store: several replicas share one database through a psycopg connection pool.

Every write is one PostgreSQL transaction (READ COMMITTED) on a pooled connection. What makes
the shared queries safe with N writers:
- dedup (`claim_event`, `claim_message`) is `INSERT … ON CONFLICT DO NOTHING`: of two replicas
  claiming one key, the second waits for the first's commit and then inserts nothing;
- a write that reads a session's rows before changing them locks the session's row first
  (`Queries._require_session`), so appends and rewrites of one session never interleave;
- reminder claims are compare-and-set `UPDATE … WHERE status = 'pending' AND due_at = ?`: the
  loser re-reads the row after the winner commits and no longer matches;
- fencing: a store opened with a `replica` id first checks, in every write transaction, that the
  replica's row is alive (`FOR KEY SHARE`: a reaper locks the row `FOR UPDATE` before marking it
  dead, so it waits for the writes in flight, while heartbeats, plain updates, never wait for them);
  a replica declared dead gets `FencedError` and changes nothing.

Every connection has TCP keepalives and a connect timeout, so a half-open connection (a database
host gone without a word) fails within seconds instead of hanging a turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from bot.errors import FencedError, StoreError
from bot.store.cluster import ClusterQueries
from bot.store.db import POSTGRES, Body, PgDb, T
from bot.store.pg_schema import has_jobs_schema, migrate
from bot.store.store import Store

CONNECT_TIMEOUT_S = 10
POOL_MAX_SIZE = 5
CONNECTION_KWARGS: dict[str, Any] = {
    "autocommit": True,  # a transaction is opened explicitly, by `transaction()`
    "connect_timeout": CONNECT_TIMEOUT_S,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}
_FENCE = "SELECT 1 FROM replicas WHERE id = %s AND state IN ('alive', 'stopping') FOR KEY SHARE"


def describe(dsn: str) -> str:
    """Where a DSN points, without its password: `user@host:port/dbname`."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(an unparsable BOT_DATABASE_URL)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"{user}{parts.get('host') or 'localhost'}{port}/{parts.get('dbname') or ''}"


async def connect(dsn: str) -> psycopg.AsyncConnection[Any]:
    """One connection with the store's settings; StoreError naming where (never the password) on failure."""
    try:
        return await psycopg.AsyncConnection.connect(dsn, **CONNECTION_KWARGS)
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to PostgreSQL at {describe(dsn)}: {' '.join(str(exc).split())}") from exc


class PostgresStore(ClusterQueries, Store):
    """The store on a PostgreSQL database shared by replicas; `replica` (if any) fences its writes."""

    dialect = POSTGRES

    def __init__(self, pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]], *, replica: str | None) -> None:
        self._pool = pool
        self.replica = replica

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        replica: str | None = None,
        min_size: int = 1,
        max_size: int = POOL_MAX_SIZE,
        require_jobs_schema: bool = True,
    ) -> PostgresStore:
        """Connect, apply our migrations (advisory-locked) and open the pool; StoreError if that cannot be done.

        With `require_jobs_schema`, procrastinate's schema must already be there: it is applied only by
        `threadbot migrate`, never behind a starting daemon's back."""
        where = describe(dsn)
        conn = await connect(dsn)
        try:
            await migrate(conn)
            if require_jobs_schema and not await has_jobs_schema(conn):
                raise StoreError(
                    f"PostgreSQL at {where} has no procrastinate schema (procrastinate_jobs): run `threadbot migrate`"
                )
        finally:
            await conn.close()
        pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            dsn, kwargs=CONNECTION_KWARGS, min_size=min_size, max_size=max_size, open=False, name="threadbot"
        )
        try:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except PoolTimeout as exc:
            await pool.close()
            raise StoreError(f"cannot open a connection pool to PostgreSQL at {where}: {exc}") from exc
        return cls(pool, replica=replica)

    async def close(self) -> None:
        await self._pool.close()

    async def _scrub(self) -> None:
        """Nothing to do here: PostgreSQL's autovacuum reclaims deleted rows' space on its own schedule
        (VACUUM cannot run inside the store's transactions); the README says so."""

    async def _transact(self, body: Body[T]) -> T:
        """`body` in one fenced transaction (`transaction`), spoken to in the store's `?` SQL."""
        async with self.transaction() as conn:
            return await body(PgDb(conn))

    async def _query(self, body: Body[T]) -> T:
        """`body` on a pooled connection in autocommit: each statement sees what is committed when it runs."""
        async with self._pool.connection() as conn:
            return await body(PgDb(conn))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection inside an open, fenced transaction: cluster code runs its own SQL (defer a job)
        in the same transaction as the store's writes; it commits when the block ends, rolls back if it raises."""
        async with self._pool.connection() as conn, conn.transaction():
            if self.replica is not None:
                cursor = await conn.execute(_FENCE, (self.replica,))
                if await cursor.fetchone() is None:
                    raise FencedError(f"replica {self.replica} is no longer alive: its writes are refused")
            yield conn
