"""The doorbell: PostgreSQL NOTIFY tells the replica that owns a thread to look at the database now.

Injections and cancels are written as durable rows first; the ring only shortens the wait, so a
lost ring costs latency, never data. Each replica keeps one LISTEN connection; when it drops, the
doorbell reconnects with backoff and runs the polling backstop once right away (rings sent while
it was deaf are gone), and the backstop also runs every `backstop_s` for anything else missed.

NOTIFY and LISTEN need a session-level connection: they do not pass through PgBouncer in
transaction pooling mode. Point the DSN at PostgreSQL directly or at a session-mode pool.

A NOTIFY reaches every session of the database, whatever its `search_path`, so the channel is named
after the schema the DSN uses (`threadbot:public` by default): two deployments in two schemas of one
database would otherwise act on each other's rings, whose ids and thread keys overlap.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from bot.cluster.link import Link, connect
from bot.concurrency import TaskSet, backoff_s

log = logging.getLogger(__name__)

CHANNEL = "threadbot"
MAX_CHANNEL_BYTES = 63
"""PostgreSQL's longest identifier; pg_notify refuses a longer channel name."""

IDLE_CHECK_S = 30.0
"""How long the listener waits in silence before proving the connection alive with a query."""


@dataclass(frozen=True)
class Ring:
    """One notification: what happened (`kind`) to which thread or call (`key`), plus any extras."""

    kind: str
    key: str
    extra: dict[str, Any] = field(default_factory=dict)


def channel_for(schema: str) -> str:
    """The doorbell's channel of the deployment in `schema` (see the module docstring)."""
    name = f"{CHANNEL}:{schema}"
    if len(name.encode()) <= MAX_CHANNEL_BYTES:
        return name
    return f"{CHANNEL}:{hashlib.sha256(schema.encode()).hexdigest()[:40]}"


def encode(kind: str, key: str, extra: dict[str, Any]) -> str:
    return json.dumps({**extra, "kind": kind, "key": key}, separators=(",", ":"))


def decode(payload: str) -> Ring | None:
    """The ring in a payload, or None for one that is not ours (anyone may NOTIFY the channel)."""
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    kind, key = data.pop("kind", None), data.pop("key", None)
    if not isinstance(kind, str) or not isinstance(key, str):
        return None
    return Ring(kind, key, data)


class Doorbell:
    """One replica's LISTEN connection and its sending side."""

    def __init__(
        self,
        *,
        dsn: str,
        handler: Callable[[Ring], Coroutine[Any, Any, None]],
        backstop: Callable[[], Awaitable[None]],
        backstop_s: float = 5.0,
        channel: str | None = None,
        backoff_s: tuple[float, float] = (0.1, 5.0),
    ) -> None:
        self._dsn = dsn
        self._handler = handler
        self._backstop = backstop
        self._backstop_s = backstop_s
        self._channel = channel
        """None until `open` names it after the DSN's schema."""
        self._backoff_s = backoff_s
        self._sender = Link(dsn, application_name="threadbot doorbell sender")
        self._tasks = TaskSet()

    @property
    def channel(self) -> str:
        if self._channel is None:
            raise RuntimeError("the doorbell's channel is named by open(), before any ring")
        return self._channel

    async def open(self) -> None:
        """Name the channel after the schema the DSN's sessions use, unless one was given."""
        if self._channel is None:
            [(schema,)] = await self._sender.execute("SELECT current_schema()")
            self._channel = channel_for(str(schema))

    async def start(self) -> None:
        """LISTEN now (raising if the database is unreachable at start), then keep listening."""
        await self.open()
        conn = await self._listen()
        self._tasks.spawn(self._listen_forever(conn), "doorbell listener")
        self._tasks.spawn(self._poll_forever(), "doorbell backstop")

    async def stop(self) -> None:
        """Stop listening and polling; handlers already running are cancelled too."""
        await self._tasks.close()
        await self._sender.close()

    async def ring(self, kind: str, key: str, conn: psycopg.AsyncConnection[Any] | None = None, **extra: Any) -> None:
        """Notify every replica; inside `conn`'s transaction the ring is delivered only at its commit."""
        await self.open()
        args = (self.channel, encode(kind, key, extra))
        if conn is not None:
            await conn.execute("SELECT pg_notify(%s, %s)", args)
            return
        try:
            await self._sender.execute("SELECT pg_notify(%s, %s)", args)
        except psycopg.OperationalError:  # the sending connection broke since the last ring: one more try
            await self._sender.close()
            await self._sender.execute("SELECT pg_notify(%s, %s)", args)

    async def _listen(self) -> psycopg.AsyncConnection[Any]:
        conn = await connect(self._dsn, application_name=f"threadbot doorbell {self.channel}")
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        return conn

    async def _listen_forever(self, conn: psycopg.AsyncConnection[Any]) -> None:
        while True:
            try:
                await self._consume(conn)
            except psycopg.Error as exc:  # any of them: a listener that gives up leaves only the backstop
                log.warning("doorbell connection lost (%s); reconnecting", exc)
            finally:
                await conn.close()
            conn = await self._reconnect()
            self._tasks.spawn(self._run_backstop(), "doorbell backstop after a reconnect")

    async def _consume(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Dispatch rings until the connection fails; silence is checked with a query now and then."""
        while True:
            async for notify in conn.notifies(timeout=IDLE_CHECK_S):
                ring = decode(notify.payload)
                if ring is None:
                    log.warning("doorbell ignored a payload that is not a ring: %.200s", notify.payload)
                else:  # beside the listener, so a slow handler never delays the next ring
                    self._tasks.spawn(self._handler(ring), f"doorbell handler for {ring.kind} {ring.key}")
            await conn.execute("SELECT 1")

    async def _reconnect(self) -> psycopg.AsyncConnection[Any]:
        first_s, max_s = self._backoff_s
        attempt = 0
        while True:
            try:
                return await self._listen()
            except psycopg.Error as exc:
                attempt += 1
                delay_s = backoff_s(attempt, first_s=first_s, max_s=max_s)
                log.warning("doorbell cannot reconnect (%s); next try in %.1f s", exc, delay_s)
                await asyncio.sleep(delay_s)

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self._backstop_s)
            await self._run_backstop()

    async def _run_backstop(self) -> None:
        try:
            await self._backstop()
        except Exception:
            log.exception("doorbell backstop failed")
