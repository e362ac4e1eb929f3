"""A throwaway PostgreSQL schema per test, so cluster tests share one database without seeing each other.

Test modules import `pg_fixture` (it registers the fixture `pg`). The schema comes from
store_backends.scratch_schema: every object (procrastinate's tables and functions, ours) lands in
it, dropping it with CASCADE afterwards leaves the database as it was, and without a PostgreSQL
the test is skipped (failed under CI). LISTEN channels are database-wide; the doorbell names its
own after the schema, so tests in other schemas never hear it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import psycopg
import pytest
from store_backends import scratch_schema

from bot.store.pg_schema import migrate


@dataclass(frozen=True)
class PgSchema:
    """One test's schema: `dsn` points into it."""

    dsn: str

    async def connect(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        """An autocommit connection into the schema, for the test's own checks."""
        return await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)


@pytest.fixture(name="pg")
async def pg_fixture() -> AsyncIterator[PgSchema]:
    """A fresh schema, migrated as the PostgreSQL store leaves it (procrastinate's schema not applied)."""
    with scratch_schema() as dsn:
        schema = PgSchema(dsn)
        async with await schema.connect() as conn:
            await migrate(conn)
        yield schema
