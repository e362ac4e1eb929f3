"""Wiring the schedule into a core: the scheduler, its five tools, and the heartbeat job if enabled.

Kept here so `bot/app.py` only says "there is a scheduler" and starts/stops it.
"""

from __future__ import annotations

from datetime import timedelta

from bot.agent.toolbox import Toolbox
from bot.clock import utcnow
from bot.config import Settings
from bot.schedule.firing import Clock, Waker
from bot.schedule.heartbeat import HEARTBEAT_SESSION_PREFIX, Heartbeat
from bot.schedule.reminder_tools import reminder_tools
from bot.schedule.retention import RETENTION_JOB_ID, RETENTION_SWEEP_S, Retention
from bot.schedule.scheduler import ChangeListener, Periodic, Scheduler
from bot.schedule.wait_tools import wait_tools
from bot.schedule.zones import Zones
from bot.store import Store
from bot.store.forgetting import Forgetting
from bot.types import EngineOutput, Provider, SessionFilter, TimezoneLookup

HEARTBEAT_JOB_ID = "heartbeat"
PRUNE_JOB_ID = "prune-seen-events"
PRUNE_INTERVAL_S = 24 * 3600
SEEN_EVENTS_KEEP = timedelta(days=7)


def build_scheduler(
    settings: Settings,
    *,
    store: Store,
    engine: Waker,
    output: EngineOutput,
    provider: Provider,
    toolbox: Toolbox,
    user_timezone: TimezoneLookup | None = None,
    clock: Clock | None = None,
    owns: SessionFilter | None = None,
    periodic: Periodic | None = None,
    on_change: ChangeListener | None = None,
) -> Scheduler:
    """A scheduler (not started) reporting to `output` and waking `engine`; adds the tools to `toolbox`."""
    scheduler = Scheduler(
        store=store,
        waker=engine,
        output=output,
        zone=settings.zone,
        max_lateness_s=settings.bot_max_lateness_s,
        clock=clock or utcnow,
        owns=owns,
        periodic=periodic,
        max_self_wakes_per_day=settings.bot_max_self_wakes_per_day,
        on_change=on_change,
    )
    now = clock or utcnow

    async def prune_seen_events() -> int:
        """Slack redelivers an event for minutes at most; a week of dedup keys is plenty.
        Answered inbox rows go too: their text is in the conversation, nothing is owed."""
        return await store.prune_events(now() - SEEN_EVENTS_KEEP) + await store.prune_inbox(now() - SEEN_EVENTS_KEEP)

    scheduler.every(PRUNE_JOB_ID, PRUNE_INTERVAL_S, prune_seen_events)
    if settings.bot_retention_days > 0:
        keep = timedelta(days=settings.bot_retention_days)
        retention = Retention(Forgetting(store, settings.work_root), keep, now, owns=owns)
        scheduler.every(RETENTION_JOB_ID, RETENTION_SWEEP_S, retention.sweep)
    zones = Zones(settings.zone, user_timezone)
    for item in (
        *wait_tools(scheduler, default_zone=settings.zone, max_wait_s=settings.bot_max_wait_s, quotas=settings.quotas),
        *reminder_tools(scheduler, zones, settings.quotas),
    ):
        toolbox.add(item)
    # The heartbeat's sessions are this scheduler's only if the edge running it owns them (Slack does).
    owns_heartbeat = owns is None or owns(HEARTBEAT_SESSION_PREFIX)
    if settings.heartbeat_enabled and owns_heartbeat:
        assert settings.bot_heartbeat_channel is not None
        heartbeat = Heartbeat(
            path=settings.bot_data_dir / "HEARTBEAT.md",
            channel=settings.bot_heartbeat_channel,
            zone=settings.zone,
            active_hours=settings.bot_heartbeat_active_hours,
            provider=provider,
            store=store,
            engine=engine,
            clock=clock or utcnow,
        )
        scheduler.every(HEARTBEAT_JOB_ID, settings.bot_heartbeat_interval_s, heartbeat.tick)
    return scheduler
