"""The narrow seam between the store's queries and a database driver: `Db`, with one adapter per back end.

The query mixins write their SQL once, with `?` placeholders, in the dialect both SQLite and
PostgreSQL speak (`INSERT … ON CONFLICT`, `RETURNING`, `CASE` instead of SQLite's two-argument
`MAX`). The few spots where the two differ (merging JSON objects, reading a JSON field, the column
that keeps insertion order, locking a session's row) come from the adapter's `Dialect`, so the
queries stay one set. Both schemas keep timestamps as ISO TEXT and booleans as INTEGER for the
same reason (bot/store/schema.py and bot/store/pg_schema.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, LiteralString, Protocol, TypeVar, cast

from bot.errors import StoreError

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import RowMaker

T = TypeVar("T")
"""What a store transaction's body returns (`Body`, `Store._transact`), for every module of the store."""
Body = Callable[["Db"], Coroutine[Any, Any, T]]
"""A store method's statements, as one coroutine over its `Db` (see `Store._transact` and `Store._query`)."""
TxHook = Callable[["psycopg.AsyncConnection[Any]"], Awaitable[None]]
"""Work a caller runs on the PostgreSQL connection inside a store write's transaction (e.g. defer a job)."""


class Row(Protocol):
    """A result row: `row["col"]`, `row[0]`, `keys()` and iteration, as `sqlite3.Row` offers them."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> list[str]: ...

    def __iter__(self) -> Iterator[Any]: ...


@dataclass(frozen=True, slots=True)
class Result:
    rowcount: int


@dataclass(frozen=True, slots=True)
class Dialect:
    """The SQL fragments that differ between the back ends."""

    json_patch: str
    """`{a}`/`{b}` are two JSON object texts; the result is `a` with `b`'s keys laid over it, as text."""
    json_field: str
    """`{doc}` is a JSON text column, `{name}` a plain key; the result is that field as text."""
    row_order: str
    """The column that orders rows as inserted (SQLite's implicit `rowid`, an identity column in PostgreSQL)."""
    lock_row: str
    """Appended to a SELECT of a session row in a write: other writers of that session wait for this one."""
    lock_name: str
    """A statement taking a lock on the text parameter until the write ends: other writes naming it wait.
    Empty where writes never run side by side."""


SQLITE = Dialect(
    json_patch="json_patch({a}, {b})",
    json_field="json_extract({doc}, '$.{name}')",
    row_order="rowid",
    lock_row="",  # one worker thread runs one transaction at a time: no other writer to wait for
    lock_name="",
)
POSTGRES = Dialect(
    json_patch="(({a})::jsonb || ({b})::jsonb)::text",
    json_field="(({doc})::jsonb ->> '{name}')",
    row_order="ord",
    lock_row=" FOR NO KEY UPDATE",  # blocks the session's other writers, not inserts that merely reference it
    lock_name="SELECT pg_advisory_xact_lock(hashtext(?))",
)


class Db(Protocol):
    """What a query needs of a connection inside a body run by `Store._transact` or `Store._query`."""

    dialect: Dialect

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> Result: ...

    async def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> None: ...

    async def fetch(self, sql: str, *params: Any) -> list[Row]: ...

    async def hand_over(self, then: TxHook) -> None:
        """Run `then` on the native connection inside the open transaction (PostgreSQL only)."""


class SqliteDb:
    """The sqlite3 connection itself, used on aiosqlite's worker thread while a whole body runs there
    (`SqliteStore._transact`, `SqliteStore._query`): every statement runs as it is called, so each await here
    finishes at once. Its `?` placeholders and `sqlite3.Row` rows are the store's own conventions."""

    dialect = SQLITE

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> Result:
        return Result(self.conn.execute(sql, params).rowcount)

    async def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> None:
        self.conn.executemany(sql, seq)

    async def fetch(self, sql: str, *params: Any) -> list[Row]:
        rows: list[sqlite3.Row] = self.conn.execute(sql, params).fetchall()
        return list(rows)

    async def hand_over(self, then: TxHook) -> None:
        raise StoreError("work inside a store transaction needs PostgreSQL (BOT_DATABASE_URL)")


def run_to_end(work: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (a store body over `SqliteDb`) to its end, here and now."""
    try:
        work.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    work.close()
    raise RuntimeError("a store body awaited something other than its own statements")


def fetching(sql: str, *params: Any) -> Body[list[Row]]:
    """The body of a method that is one statement returning rows (`await store._query(fetching(...))`)."""

    async def body(db: Db) -> list[Row]:
        return await db.fetch(sql, *params)

    return body


def executing(sql: str, *params: Any) -> Body[Result]:
    """The body of a write that is one statement whose row count is all it returns."""

    async def body(db: Db) -> Result:
        return await db.execute(sql, params)

    return body


@lru_cache(maxsize=512)
def to_pyformat(sql: str) -> LiteralString:
    """`?` placeholders as psycopg's `%s`, a literal `%` (a LIKE pattern) escaped as `%%`.

    The store's SQL holds no `?` inside string literals, so a plain replacement is exact; it is all
    the package's own text (values always travel as parameters), hence `LiteralString`."""
    return sql.replace("%", "%%").replace("?", "%s")


class PgRow:
    """A psycopg row that reads like `sqlite3.Row`, by position and by column name."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: Sequence[Any], index: dict[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: int | str, /) -> Any:
        return self._values[key if isinstance(key, int) else self._index[key]]

    def keys(self) -> list[str]:
        return list(self._index)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def pg_row(cursor: psycopg.AsyncCursor[Any]) -> RowMaker[PgRow]:
    """A psycopg row factory making `PgRow`s; the name index is built once per result."""
    index = {column.name: i for i, column in enumerate(cursor.description or ())}

    def make(values: Sequence[Any]) -> PgRow:
        return PgRow(values, index)

    return make


class PgDb:
    """A psycopg connection, spoken to in the store's `?` SQL."""

    dialect = POSTGRES

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> Result:
        cursor = await self.conn.execute(to_pyformat(sql), params)
        return Result(cursor.rowcount)

    async def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> None:
        rows = list(seq)
        if rows:
            async with self.conn.cursor() as cursor:
                await cursor.executemany(to_pyformat(sql), rows)

    async def fetch(self, sql: str, *params: Any) -> list[Row]:
        async with self.conn.cursor(row_factory=pg_row) as cursor:
            await cursor.execute(to_pyformat(sql), params)
            return list(await cursor.fetchall())

    async def hand_over(self, then: TxHook) -> None:
        await then(self.conn)
