"""One lazily (re)opened autocommit connection, and the libpq settings every cluster connection uses.

Small cluster parts (leases, tick claims, doorbell rings) each send a statement now and then; a
pool would be overkill, but a connection broken by a restart or a timed-out query must not stay
broken, so it is reopened on the next use.
"""

from __future__ import annotations

import asyncio
from typing import Any, LiteralString

import psycopg

KEEPALIVES: dict[str, int] = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}
"""libpq keepalive settings: a silent peer is declared dead after about 10 + 3 x 5 = 25 s, so a
half-open connection cannot hang a worker or a listener."""


def connection_kwargs(connect_timeout_s: int = 5) -> dict[str, Any]:
    """libpq connection parameters for every cluster connection: keepalives and a bounded connect."""
    return {**KEEPALIVES, "connect_timeout": connect_timeout_s}


async def connect(dsn: str, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
    """An autocommit connection with the cluster's settings."""
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True, **connection_kwargs(), **kwargs)


class Link:
    """A connection opened at first use and reopened after it breaks."""

    def __init__(self, dsn: str, **kwargs: Any) -> None:
        self._dsn = dsn
        self._kwargs = kwargs
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._opening = asyncio.Lock()

    async def execute(self, query: LiteralString, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; the rows it returns, if any."""
        async with self._opening:  # concurrent first uses share one connection
            if self._conn is None or self._conn.closed:
                self._conn = await connect(self._dsn, **self._kwargs)
            conn = self._conn
        cur = await conn.execute(query, params)
        return await cur.fetchall() if cur.description else []

    async def close(self) -> None:
        """Close the connection; also the way to forget one a failed or timed-out query may have left mid-protocol."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
