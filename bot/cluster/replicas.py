"""Replica leases: each process registers a row, renews it by heartbeat, and dead ones are reaped once.

A replica owns its open calls and running threads only while its lease (`heartbeat_at` within
`lease_s` of the database's `now()`) holds. Timestamps come from the database so replicas with
skewed clocks agree on who is dead. Reaping is one conditional UPDATE, so among any number of
replicas reaping at once exactly one claims each dead replica and gets to orphan its calls and
resume its threads.

The other side of the lease is self-fencing: a replica that cannot renew for longer than the
lease, or finds its row no longer alive (it was reaped while paused), must stop; `lost` tells it.

    CREATE TABLE replicas (id TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL,
      started_at TIMESTAMPTZ NOT NULL DEFAULT now(), heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
      state TEXT NOT NULL DEFAULT 'alive' CHECK (state IN ('alive','stopping','dead','stopped')));
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable

import psycopg

from bot.cluster.link import Link

log = logging.getLogger(__name__)


def new_replica_id(host: str, pid: int) -> str:
    """host-pid-random: readable in logs, and new at every process start even when a pid is reused."""
    return f"{host}-{pid}-{secrets.token_hex(3)}"


class Replicas:
    """This process's lease in the replicas table, and the cluster-wide view of the others."""

    def __init__(
        self,
        *,
        dsn: str,
        lost: Callable[[], Awaitable[None]],
        interval_s: float = 2.0,
        lease_s: float = 10.0,
        replica_id: str | None = None,
    ) -> None:
        """`replica_id` when the id was needed before the lease (the store fences by it); else a new one."""
        self._lost = lost
        self._interval_s = interval_s
        self._lease_s = lease_s
        host, pid = socket.gethostname(), os.getpid()
        self._host, self._pid = host, pid
        self.id = replica_id or new_replica_id(host, pid)
        self._link = Link(dsn)
        self._beat_link = Link(dsn)  # its own: a timed-out heartbeat closes it, and must not fail a reap
        self._beating: asyncio.Task[None] | None = None

    async def register(self) -> str:
        """Insert this replica's row and start renewing it; returns the replica id."""
        await self._link.execute(
            "INSERT INTO replicas (id, host, pid) VALUES (%s, %s, %s)", (self.id, self._host, self._pid)
        )
        self._beating = asyncio.create_task(self._beat_forever(), name=f"heartbeat {self.id}")
        return self.id

    async def heartbeat(self) -> bool:
        """Renew the lease once; False when the row is no longer ours to renew (reaped or stopped)."""
        rows = await self._beat_link.execute(
            "UPDATE replicas SET heartbeat_at = now() WHERE id = %s AND state IN ('alive', 'stopping') RETURNING id",
            (self.id,),
        )
        return bool(rows)

    async def record_worker(self, worker_id: int) -> None:
        """Name this replica's procrastinate worker, so its jobs count as stalled once the replica is gone."""
        await self._link.execute("UPDATE replicas SET worker_id = %s WHERE id = %s", (worker_id, self.id))

    async def mark_stopping(self) -> None:
        """Tell the others this replica takes no new work; it still renews its lease while it drains."""
        await self._link.execute("UPDATE replicas SET state = 'stopping' WHERE id = %s AND state = 'alive'", (self.id,))

    async def mark_stopped(self) -> None:
        """End the lease at a graceful exit: stop renewing, and mark the row so nobody reaps it."""
        await self._stop_beating()
        await self._link.execute(
            "UPDATE replicas SET state = 'stopped' WHERE id = %s AND state IN ('alive', 'stopping')", (self.id,)
        )

    async def close(self) -> None:
        """Stop renewing (without marking the row) and close the connections."""
        await self._stop_beating()
        await self._link.close()
        await self._beat_link.close()

    async def reap(self, lease_s: float) -> list[str]:
        """Claim the replicas whose lease ran out; each is returned to exactly one caller cluster-wide."""
        rows = await self._link.execute(
            # FOR UPDATE waits for the fenced writes still in flight (they hold the row FOR KEY SHARE).
            "UPDATE replicas SET state = 'dead' WHERE id IN (SELECT id FROM replicas"
            " WHERE state IN ('alive', 'stopping') AND heartbeat_at < now() - make_interval(secs => %s) FOR UPDATE)"
            " RETURNING id",
            (lease_s,),
        )
        return sorted(str(row[0]) for row in rows)

    async def live_count(self) -> int:
        """Replicas holding a lease now (alive or draining), for splitting per-workspace budgets."""
        rows = await self._link.execute(
            "SELECT count(*) FROM replicas WHERE state IN ('alive', 'stopping')"
            " AND heartbeat_at >= now() - make_interval(secs => %s)",
            (self._lease_s,),
        )
        return int(rows[0][0])

    async def _beat_forever(self) -> None:
        """Renew every `interval_s`; report `lost` once the lease cannot be trusted any more."""
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self._interval_s)
            sent = time.monotonic()
            try:
                async with asyncio.timeout(self._lease_s / 2):
                    ours = await self.heartbeat()
            except (psycopg.Error, TimeoutError) as exc:
                await self._beat_link.close()
                if time.monotonic() - renewed <= self._lease_s:
                    log.warning("replica %s heartbeat failed (%r); retrying", self.id, exc)
                    continue
                log.error("replica %s could not renew its lease for %.1f s", self.id, time.monotonic() - renewed)
                break
            if not ours:
                log.error("replica %s found its row no longer alive: another replica reaped it", self.id)
                break
            renewed = sent  # the database stamped the lease no earlier than this
        await self._lost()

    async def _stop_beating(self) -> None:
        task, self._beating = self._beating, None
        if task is not None and task is not asyncio.current_task():  # `lost` may call close()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
