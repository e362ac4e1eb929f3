"""The store's back ends for tests: a scratch PostgreSQL schema per test (`pg_dsn`), and `store_opener`,
which runs a test once per back end (SQLite, PostgreSQL) against the same `Store` interface.

PostgreSQL is `THREADBOT_TEST_DATABASE_URL` (default postgresql://127.0.0.1:5432/test). When it cannot
be reached the PostgreSQL half is skipped, except under CI (env `CI` set), where it fails: CI always has it.
Each test gets its own schema (`CREATE SCHEMA t_<random>`, dropped with everything in it afterwards) and a
DSN whose `options=-csearch_path=…` puts the test's tables there, so tests never see each other's rows.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from bot.store import SqliteStore, Store
from bot.store.db import fetching
from bot.store.pg_schema import apply_jobs_schema
from bot.store.postgres import PostgresStore

TEST_DSN_ENV = "THREADBOT_TEST_DATABASE_URL"
DEFAULT_TEST_DSN = "postgresql://127.0.0.1:5432/test"
BACKENDS = ("sqlite", "postgres")


@functools.cache
def _probe(dsn: str) -> str | None:
    """Why the test server cannot be used (None: it can); asked once per run."""
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error as exc:
        return str(exc).strip()
    return None


def base_dsn() -> str:
    """The test server's DSN; skips the test (fails it under CI) when the server is out of reach."""
    dsn = os.environ.get(TEST_DSN_ENV, DEFAULT_TEST_DSN)
    problem = _probe(dsn)
    if problem is not None:
        message = f"PostgreSQL at {TEST_DSN_ENV}={dsn} is unreachable: {problem}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return dsn


def with_search_path(dsn: str, schema: str) -> str:
    """The DSN (a URL) whose sessions put everything they create or read in `schema`."""
    parts = urlsplit(dsn)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    query.append(("options", f"-csearch_path={schema}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextlib.contextmanager
def scratch_schema() -> Iterator[str]:
    """A fresh schema on the test server, dropped with its contents at exit; yields a DSN that uses it."""
    dsn = base_dsn()
    schema = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            yield with_search_path(dsn, schema)
        finally:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    """A PostgreSQL URL on a schema of this test's own (empty: nothing migrated yet)."""
    with scratch_schema() as dsn:
        yield dsn


@pytest.fixture
async def pg_jobs_dsn(pg_dsn: str) -> str:
    """`pg_dsn` with procrastinate's schema applied, as `threadbot migrate` leaves a database."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await apply_jobs_schema(conn)
    return pg_dsn


class StoreOpener:
    """Opens stores of one back end on one database (so a reopen sees what was written); closes them all."""

    def __init__(self, backend: str, path: Path, dsn: str | None) -> None:
        self.backend = backend
        self.path = path
        self.dsn = dsn
        self._open: list[Store] = []

    async def __call__(self, *, replica: str | None = None) -> Store:
        store: Store
        if self.dsn is not None:
            store = await PostgresStore.open(self.dsn, replica=replica, require_jobs_schema=False)
        else:
            store = await SqliteStore.open(self.path)
        self._open.append(store)
        return store

    async def close(self, store: Store) -> None:
        self._open.remove(store)
        await store.close()

    async def close_all(self) -> None:
        while self._open:
            await self._open.pop().close()


@pytest.fixture(params=BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def store_opener(store_backend: str, tmp_path: Path) -> AsyncIterator[StoreOpener]:
    """A `StoreOpener` for each back end in turn (the test runs once per back end)."""
    with contextlib.ExitStack() as stack:
        dsn = stack.enter_context(scratch_schema()) if store_backend == "postgres" else None
        opener = StoreOpener(store_backend, tmp_path / "bot.db", dsn)
        try:
            yield opener
        finally:
            await opener.close_all()


@pytest.fixture
async def any_store(store_opener: StoreOpener) -> Store:
    """An open store of each back end in turn, closed after the test."""
    return await store_opener()


async def message_archive(store: Store, key: str) -> list[dict[str, Any]]:
    """Every message the session ever had, compacted away or not, in the order written: what an audit
    reads with SQL (the bot itself never reads the archive back)."""
    sql_text = (
        "SELECT body FROM ("
        " SELECT body, created_at, 0 AS src, id AS ord FROM messages_archive WHERE session_key = ?"
        " UNION ALL SELECT body, created_at, 1, seq FROM messages WHERE session_key = ?"
        ") AS m ORDER BY created_at, src, ord"
    )
    rows = await store._query(fetching(sql_text, key, key))
    return [json.loads(row[0]) for row in rows]
