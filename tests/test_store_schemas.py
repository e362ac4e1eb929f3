"""The two schemas stay one: every table the shared queries touch has the same columns in SQLite and PostgreSQL.

The queries are written once for both back ends (bot/store/db.py), so a column added by a migration on one
side only would fail on the other at run time; this finds it at test time.
"""

from __future__ import annotations

from pathlib import Path

import aiosqlite
import psycopg
from pytest import MonkeyPatch

from bot.store import SqliteStore, pg_schema
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


async def test_postgresql_moves_owed_reminder_posts_into_the_outbox(pg_dsn: str, monkeypatch: MonkeyPatch) -> None:
    """Version 5: what the old reminder-post table still owed is owed in the one outbox, and the table goes."""
    monkeypatch.setattr(pg_schema, "MIGRATIONS", pg_schema.MIGRATIONS[:4])
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await migrate(conn)
        due = "2024-01-01T00:00:00.000000+00:00"
        await conn.execute("INSERT INTO sessions (key, address, created_at) VALUES ('k', '{}', %s)", (due,))
        for rid, state in ((1, "owed"), (2, "posted")):
            await conn.execute(
                "INSERT INTO reminders (id, session_key, kind, text, requester, due_at, status, created_at)"
                " VALUES (%s, 'k', 'reminder', %s, 'U1', %s, 'fired', %s)",
                (rid, f"stretch {rid}", due, due),
            )
            await conn.execute(
                "INSERT INTO reminder_posts (reminder_id, due_at, text, claimed_at, state, replica)"
                " VALUES (%s, %s, %s, %s, %s, 'r1')",
                (rid, due, f"stretch {rid}", due, state),
            )
        monkeypatch.undo()
        await migrate(conn)
        cursor = await conn.execute("SELECT session_key, channel, text, line, requester, replica FROM outbox")
        assert await cursor.fetchall() == [("k", None, "stretch 1", "reminder", "U1", "r1")]
        cursor = await conn.execute("SELECT to_regclass('reminder_posts') IS NULL")
        assert await cursor.fetchone() == (True,)
