"""Housekeeping jobs the scheduler runs for the store."""

from __future__ import annotations

from datetime import timedelta

from bot.app import Core
from bot.clock import utcnow
from bot.schedule.setup import PRUNE_JOB_ID, SEEN_EVENTS_KEEP


async def test_seen_events_are_pruned_daily(core: Core) -> None:
    assert core.scheduler.next_run_time(PRUNE_JOB_ID) is not None
    assert await core.store.claim_event("event:old")
    removed = await core.store.prune_events(utcnow() + timedelta(seconds=1))
    assert removed == 1 and await core.store.claim_event("event:old")
    assert timedelta(days=1) <= SEEN_EVENTS_KEEP, "long enough for any Slack redelivery"
