"""The two schemas stay one: every table the shared queries touch has the same columns in SQLite and PostgreSQL.

The queries are written once for both back ends (bot/store/db.py), so a column added by a migration on one
side only would fail on the other at run time; this finds it at test time.
"""

from __future__ import annotations

from pathlib import Path

import aiosqlite
import psycopg

from bot.store import SqliteStore
from bot.store.pg_schema import migrate

POSTGRES_ONLY_TABLES = {"replicas", "cluster_rings", "ticks", "threadbot_schema_version"}
POSTGRES_ONLY_COLUMNS = {("tool_calls", "ord")}  # the insertion order SQLite's rowid gives for free


async def sqlite_columns(path: Path) -> dict[str, set[str]]:
    store = await SqliteStore.open(path)
    await store.close()
    async with aiosqlite.connect(path) as db:
        tables = [row[0] for row in await db.execute_fetchall("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            table: {row[1] for row in await db.execute_fetchall(f"PRAGMA table_info({table})")}
            for table in tables
            if not table.startswith("sqlite_")
        }


async def postgres_columns(dsn: str) -> dict[str, set[str]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await migrate(conn)
        cursor = await conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        )
        columns: dict[str, set[str]] = {}
        for table, column in await cursor.fetchall():
            if table not in POSTGRES_ONLY_TABLES and (table, column) not in POSTGRES_ONLY_COLUMNS:
                columns.setdefault(table, set()).add(column)
        return columns


async def test_sqlite_and_postgresql_have_the_same_tables_and_columns(tmp_path: Path, pg_dsn: str) -> None:
    assert await sqlite_columns(tmp_path / "bot.db") == await postgres_columns(pg_dsn)
