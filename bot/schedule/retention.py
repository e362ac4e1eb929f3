"""Retention: sessions idle longer than `BOT_RETENTION_DAYS` are forgotten, one sweep an hour.

The sweep is an interval job of the scheduler, so in a cluster it runs once per tick on one replica
(bot/cluster/ticks.py), and with SQLite in the one process. A session is forgotten as a `forget`
reply forgets it, rows and files (`Forgetting`, bot/store/forgetting.py, which says what goes and what stays).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from bot.schedule.firing import Clock
from bot.store.forgetting import Forgetting
from bot.types import SessionFilter

log = logging.getLogger(__name__)

RETENTION_JOB_ID = "retention"
RETENTION_SWEEP_S = 3600.0


@dataclass(frozen=True, slots=True)
class Retention:
    """Forgets this edge's sessions (`owns`) with no trace for `keep`: their rows, and their commands'
    files (in a cluster, the files on the replica that runs the sweep)."""

    forgetting: Forgetting
    keep: timedelta
    clock: Clock
    owns: SessionFilter | None = None

    async def sweep(self) -> list[str]:
        """Forget every idle session; returns their keys."""
        forgotten = []
        for key in await self.forgetting.store.idle_sessions(self.clock() - self.keep):
            if (self.owns is None or self.owns(key)) and await self.forgetting.forget(key):
                forgotten.append(key)
        if forgotten:
            log.info("retention: forgot %d sessions idle for over %s", len(forgotten), self.keep)
        return forgotten
