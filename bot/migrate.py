"""`threadbot migrate`: bring the database's schema up to this program's, and say where it stands.

SQLite (no `BOT_DATABASE_URL`): opening the file migrates it. PostgreSQL: our migrations, then
procrastinate's schema when it is missing (bot/store/pg_schema.py), both under our advisory lock,
then both are verified. `run` applies only our migrations and refuses to start without
procrastinate's schema, so a new job queue is created by someone who asked for it.
`postgres_state` is what `threadbot check` reads, creating nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import Settings
from bot.errors import StoreError
from bot.store import SqliteStore, schema
from bot.store.pg_schema import MIGRATIONS, apply_jobs_schema, has_jobs_schema, migrate, schema_version
from bot.store.postgres import connect, describe


@dataclass(frozen=True, slots=True)
class PostgresState:
    where: str
    version: int
    jobs_schema: bool

    @property
    def problem(self) -> str | None:
        """What keeps `run` from starting on this database, None when nothing does."""
        if self.version > len(MIGRATIONS):
            return f"schema version {self.version} is newer than this program knows ({len(MIGRATIONS)})"
        if self.version < len(MIGRATIONS):
            return f"schema version {self.version}, this program needs {len(MIGRATIONS)}: run `threadbot migrate`"
        if not self.jobs_schema:
            return "no procrastinate schema (procrastinate_jobs): run `threadbot migrate`"
        return None


async def postgres_state(dsn: str) -> PostgresState:
    """Where the database's schemas stand, read without changing anything; StoreError if it cannot be reached."""
    conn = await connect(dsn)
    try:
        return PostgresState(describe(dsn), await schema_version(conn), await has_jobs_schema(conn))
    finally:
        await conn.close()


async def migrate_database(settings: Settings) -> int:
    """Apply, verify, print one line; 0 when the database is ready for `run`, StoreError otherwise."""
    dsn = settings.database_url
    if dsn is None:
        await (await SqliteStore.open(settings.db_path)).close()
        print(f"✓ database {settings.db_path} is at schema version {len(schema.MIGRATIONS)}")
        return 0
    conn = await connect(dsn)
    try:
        await migrate(conn)
        applied = await apply_jobs_schema(conn)
    finally:
        await conn.close()
    state = await postgres_state(dsn)
    if state.problem is not None:
        raise StoreError(f"PostgreSQL at {state.where}: {state.problem}")
    jobs = "applied now" if applied else "present"
    print(f"✓ PostgreSQL at {state.where}: schema version {state.version}, procrastinate schema {jobs}")
    return 0
