"""A throwaway PostgreSQL schema per test, so cluster tests share one database without seeing each other.

Test modules import `pg_fixture` (it registers the fixture `pg`).

Every object (procrastinate's tables and functions, ours) lands in the schema named by the DSN's
`search_path`; dropping it with CASCADE afterwards leaves the database as it was. LISTEN channels are
database-wide, so tests that use them take a per-test channel name from `pg.channel`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

BASE_DSN = os.environ.get("BOT_TEST_DATABASE_URL", "postgresql://127.0.0.1:5432/test")
"""The database the cluster tests use; CI sets nothing and gets the local PostgreSQL 15."""

REPLICAS_DDL = """
CREATE TABLE replicas (id TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL,
  started_at TIMESTAMPTZ NOT NULL DEFAULT now(), heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  state TEXT NOT NULL DEFAULT 'alive' CHECK (state IN ('alive','stopping','dead','stopped')))
"""
"""The replicas table exactly as the PostgreSQL store's migrations create it."""


@dataclass(frozen=True)
class PgSchema:
    """One test's schema: `dsn` points into it, `channel` is a NOTIFY channel no other test uses."""

    name: str
    dsn: str
    channel: str

    async def connect(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        """An autocommit connection into the schema, for the test's own checks."""
        return await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)


@pytest.fixture(name="pg")
async def pg_fixture() -> AsyncIterator[PgSchema]:
    """A fresh schema with the replicas table; skips when no PostgreSQL answers."""
    name = f"t_{secrets.token_hex(6)}"
    try:
        admin = await psycopg.AsyncConnection.connect(BASE_DSN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {BASE_DSN}: {exc}")
    async with admin:
        await admin.execute(f"CREATE SCHEMA {name}")
        try:
            schema = PgSchema(name, make_conninfo(BASE_DSN, options=f"-csearch_path={name}"), f"tb_{name}")
            async with await schema.connect() as conn:
                await conn.execute(REPLICAS_DDL)
            yield schema
        finally:
            await admin.execute(f"DROP SCHEMA {name} CASCADE")
