"""A cluster for tests: N `threadbot run` processes on one PostgreSQL schema, the fake Slack and the fake model.

Each replica is a real process (`Daemon` from test_e2e_slack) with its own data dir and the same
`BOT_DATABASE_URL`; the schema is migrated first, as `threadbot migrate` would. Everything waits on
what the fakes or the database observe, with a timeout.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from daemon_rig import Daemon, Script
from fakes.anthropic_api import FakeAnthropic
from fakes.slack_api import FakeSlack

from bot.store.pg_schema import apply_jobs_schema, migrate

T = TypeVar("T")
WAIT_S = 30.0
CLUSTERS_LOCK = 0x7468_7264_626F_7402  # "thrdbot" + 2: beside the migrations' lock in the advisory namespace


@dataclass
class Cluster:
    slack: FakeSlack
    model: FakeAnthropic
    script: Script
    dsn: str
    root: Path
    replicas: list[Daemon] = field(default_factory=list)

    def add(self, **env: str) -> Daemon:
        data_dir = self.root / f"replica-{len(self.replicas) + 1}"
        data_dir.mkdir()
        daemon = Daemon(self.slack, self.model, data_dir, env={"BOT_DATABASE_URL": self.dsn, **env})
        self.replicas.append(daemon)
        return daemon

    async def start(self, count: int, **env: str) -> list[Daemon]:
        started = [self.add(**env) for _ in range(count)]
        for daemon in started:
            await daemon.start()
        await self.slack.wait_connected(WAIT_S, total=len([d for d in self.replicas if d.process is not None]))
        return started

    async def kill(self, daemon: Daemon) -> None:
        assert daemon.process is not None
        daemon.process.send_signal(signal.SIGKILL)
        await daemon.process.wait()
        daemon.process = None

    async def query(self, sql: Any, *params: Any) -> list[tuple[Any, ...]]:
        """Run one statement on the cluster's database; the rows it returns, if any."""
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            cursor = await conn.execute(sql, params)
            return await cursor.fetchall() if cursor.description else []

    async def wait_db(self, check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
        """Poll the database (the one thing that has no event to wait on) until `check` returns a truthy value."""
        async with asyncio.timeout(timeout_s):
            while True:
                result = await check()
                if result:
                    return result
                await asyncio.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    def logs(self) -> str:
        return "\n".join(f"--- replica {i + 1}\n{d.log()}" for i, d in enumerate(self.replicas))


@asynccontextmanager
async def one_cluster_at_a_time(dsn: str) -> AsyncIterator[None]:
    """Hold the test server's lock for clusters until the test ends, whichever worker runs it. A replica opens
    up to about 16 connections, so two tests' clusters side by side can pass the server's default
    `max_connections` of 100, and the refused connections then look like the replicas' own failures."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (CLUSTERS_LOCK,))
        yield  # the lock goes with the connection


@asynccontextmanager
async def cluster(dsn: str, root: Path) -> AsyncIterator[Cluster]:
    async with one_cluster_at_a_time(dsn):
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await migrate(conn)
            await apply_jobs_schema(conn)
        async with _cluster(dsn, root) as made:
            yield made


@asynccontextmanager
async def _cluster(dsn: str, root: Path) -> AsyncIterator[Cluster]:
    async with FakeSlack() as slack, FakeAnthropic() as model:
        script = Script()
        model.default = script
        rig = Cluster(slack, model, script, dsn, root)
        try:
            yield rig
        finally:
            for daemon in rig.replicas:
                try:
                    await daemon.stop()
                finally:
                    if daemon.process is not None and daemon.process.returncode is None:
                        daemon.process.kill()


@pytest.fixture
async def rig(pg_dsn: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    """A cluster on a freshly migrated schema, stopped at the end of the test (the cluster test modules' fixture)."""
    async with cluster(pg_dsn, tmp_path) as made:
        yield made


async def decision(rig: Cluster, call_id: str) -> tuple[str, str, str | None] | None:
    """A call's status, decision and who decided, as the shared database has them."""
    rows = await rig.query("SELECT status, decision, decided_by FROM tool_calls WHERE id = %s", call_id)
    return rows[0] if rows else None  # type: ignore[return-value]
