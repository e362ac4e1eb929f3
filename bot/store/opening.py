"""`open_store`: the one place that picks the back end from the settings."""

from __future__ import annotations

from bot.config import Settings
from bot.store.sqlite import SqliteStore
from bot.store.store import Store


async def open_store(settings: Settings, *, replica: str | None = None, require_jobs_schema: bool = True) -> Store:
    """PostgreSQL when `BOT_DATABASE_URL` is set (cluster mode, writes fenced by `replica`), else the SQLite file.

    `require_jobs_schema` is for PostgreSQL: see `PostgresStore.open`."""
    dsn = settings.database_url
    if dsn is None:
        return await SqliteStore.open(settings.db_path)
    from bot.store.postgres import PostgresStore  # psycopg's pool is only loaded in cluster mode

    return await PostgresStore.open(dsn, replica=replica, require_jobs_schema=require_jobs_schema)
