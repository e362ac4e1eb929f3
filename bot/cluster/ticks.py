"""Periodic work (heartbeat, housekeeping) run once per tick however many replicas are up.

Time is cut into ticks aligned on the epoch: tick n of a job with interval I starts at n x I
seconds. Every replica wakes at each boundary and tries to claim (name, n) with one
`INSERT … ON CONFLICT DO NOTHING`; the one insert that lands runs the work, the others skip it.
Aligned ticks keep working through rolling restarts (a per-process "every I from start" timer
would never fire if replicas restart more often than I), and clock skew between replicas only
moves when a tick runs, never makes it run twice.

The claim is at-most-once: a replica that dies between claiming and finishing loses that tick,
which suits a heartbeat post or a cleanup (the next tick comes) better than a doubled one.

Why not procrastinate's periodic tasks: they take cron expressions, which cannot say "every
7000 s" for an arbitrary `BOT_HEARTBEAT_INTERVAL_S`; they run as jobs in the worker's slots,
queued behind thread turns; and they drop ticks overdue by more than `max_delay`.

The claims are the `ticks` table of the PostgreSQL store's migrations (bot/store/pg_schema.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable

import psycopg

from bot.cluster.link import Link

log = logging.getLogger(__name__)


KEEP_TICKS = 10
"""Claims kept per name (older ones are pruned by each winner): enough to see recent history."""


def next_tick(now_s: float, interval_s: float) -> tuple[int, float]:
    """The first tick boundary strictly after `now_s` (epoch seconds): its number and its time."""
    tick = math.floor(now_s / interval_s) + 1
    return tick, tick * interval_s


class Ticks:
    """This replica's side of the once-per-tick jobs: claims ticks and runs the ones it wins."""

    def __init__(self, *, dsn: str, replica_id: str, clock: Callable[[], float] = time.time) -> None:
        self._link = Link(dsn)
        self._replica_id = replica_id
        self._clock = clock
        self._loops: list[asyncio.Task[None]] = []

    async def claim(self, name: str, tick: int) -> bool:
        """Whether this replica won tick `tick` of `name`; exactly one caller cluster-wide does."""
        rows = await self._link.execute(
            "INSERT INTO ticks (name, tick, replica_id) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING RETURNING tick",
            (name, tick, self._replica_id),
        )
        if rows:
            await self._link.execute("DELETE FROM ticks WHERE name = %s AND tick <= %s", (name, tick - KEEP_TICKS))
        return bool(rows)

    def every(self, name: str, interval_s: float, work: Callable[[int], Awaitable[object]]) -> None:
        """Run `work(tick)` at each aligned tick of `interval_s` that this replica wins."""
        self._loops.append(asyncio.create_task(self._run(name, interval_s, work), name=f"tick {name}"))

    async def close(self) -> None:
        """Stop every loop (a running work item is cancelled) and close the connection."""
        loops, self._loops = self._loops, []
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await self._link.close()

    async def _run(self, name: str, interval_s: float, work: Callable[[int], Awaitable[object]]) -> None:
        tick, due_s = next_tick(self._clock(), interval_s)
        while True:
            await asyncio.sleep(max(0.0, due_s - self._clock()))
            try:
                won = await self.claim(name, tick)
            except psycopg.Error as exc:
                await self._link.close()
                log.warning("tick %s #%d not claimed (%s); the next one will be tried", name, tick, exc)
                won = False
            if won:
                try:
                    await work(tick)
                except Exception:
                    log.exception("tick %s #%d failed", name, tick)
            # Boundaries passed meanwhile are skipped, not caught up: the next tick still to come.
            tick = max(tick + 1, next_tick(self._clock(), interval_s)[0])
            due_s = tick * interval_s
