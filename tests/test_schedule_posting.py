"""Reminder posts: owed from the claim, retried with backoff until the edge confirms, given up at the deadline."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from conftest import WAIT_S, RecordingOutput
from schedule_support import FakeWaker

from bot.clock import utcnow
from bot.schedule import Scheduler
from bot.schedule.posting import ReminderPoster
from bot.store import NewReminder, ReminderKind, ReminderStatus, Store
from bot.types import ReminderOutcome, ReminderPost

KEY = "test:posts"


class FlakyEdge:
    """Answers the scripted outcomes in turn, then POSTED; records every post it was asked for."""

    def __init__(self, *outcomes: ReminderOutcome) -> None:
        self.script = list(outcomes)
        self.asked: list[ReminderPost] = []
        self.changed = asyncio.Event()

    async def reminder(self, post: ReminderPost) -> ReminderOutcome:
        self.asked.append(post)
        self.changed.set()
        return self.script.pop(0) if self.script else ReminderOutcome.POSTED

    async def asked_times(self, n: int) -> None:
        async with asyncio.timeout(WAIT_S):
            while len(self.asked) < n:
                self.changed.clear()
                await self.changed.wait()


@pytest.fixture
async def store(any_store: Store) -> Store:
    """Once per back end (SQLite, PostgreSQL): owed reminder posts are store state like any other."""
    await any_store.ensure_session(KEY, {"requester": "U1"})
    return any_store


async def claimed(store: Store, text: str = "stand-up") -> ReminderPost:
    """A one-shot reminder claimed with its post owed, as the firer does it."""
    due = utcnow()
    reminder = await store.add_reminder(NewReminder(KEY, ReminderKind.REMINDER, text, due, requester="U1"))
    won = await store.claim_reminder(reminder.id, due_at=due, outcome=ReminderStatus.FIRED, owed=text)
    assert won is not None
    (post,) = [p for p in await store.owed_reminder_posts() if p.reminder_id == reminder.id]
    return post


async def test_the_claim_owes_the_post_once(store: Store) -> None:
    post = await claimed(store, "water the plants")
    assert (post.session_key, post.text, post.requester, post.recheck) == (KEY, "water the plants", "U1", False)
    again = await store.claim_reminder(post.reminder_id, due_at=post.due_at, outcome=ReminderStatus.FIRED, owed="x")
    assert again is None and len(await store.owed_reminder_posts()) == 1


async def test_a_post_not_confirmed_is_retried_with_a_recheck_until_it_lands(store: Store) -> None:
    edge = FlakyEdge(ReminderOutcome.RETRY, ReminderOutcome.RETRY)
    poster = ReminderPoster(store=store, edge=edge, retry_window_s=60, first_backoff_s=0.01)
    post = await claimed(store)
    assert await poster.deliver(post) is ReminderOutcome.RETRY
    await edge.asked_times(3)
    await asyncio.wait_for(_settled(store), WAIT_S)
    assert [p.recheck for p in edge.asked] == [False, True, True]
    await poster.stop()
    assert len(edge.asked) == 3, "posted once: no attempt after the edge confirmed"


async def test_a_post_still_failing_at_the_deadline_is_given_up(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    edge = FlakyEdge(*[ReminderOutcome.RETRY] * 1000)
    poster = ReminderPoster(store=store, edge=edge, retry_window_s=0.05, first_backoff_s=0.02)
    await poster.deliver(await claimed(store))
    await asyncio.wait_for(_settled(store), WAIT_S)
    await poster.stop()
    assert poster.retrying == 0
    assert any("giving it up" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


async def test_an_undeliverable_post_is_not_retried(store: Store) -> None:
    edge = FlakyEdge(ReminderOutcome.UNDELIVERABLE)
    poster = ReminderPoster(store=store, edge=edge, retry_window_s=60, first_backoff_s=0.01)
    assert await poster.deliver(await claimed(store)) is ReminderOutcome.UNDELIVERABLE
    assert poster.retrying == 0 and await store.owed_reminder_posts() == []


async def test_a_start_delivers_what_the_last_process_claimed_and_never_saw_posted(store: Store) -> None:
    post = await claimed(store)
    edge = FlakyEdge()
    scheduler = Scheduler(store=store, waker=FakeWaker(), output=edge, zone=ZoneInfo("UTC"), max_lateness_s=3600)  # type: ignore[arg-type]
    try:
        await scheduler.start()
        await edge.asked_times(1)
        await asyncio.wait_for(_settled(store), WAIT_S)
    finally:
        await scheduler.stop()
    (asked,) = edge.asked
    assert (asked.reminder_id, asked.due_at, asked.recheck) == (post.reminder_id, post.due_at, True)


async def test_a_claimed_wait_is_owed_to_its_session(store: Store, output: RecordingOutput) -> None:
    """A wait's note goes to the inbox with its claim, so a crash before the turn stores it loses nothing."""
    due = utcnow() - timedelta(seconds=1)
    wait = await store.add_reminder(NewReminder(KEY, ReminderKind.WAKE, "check CI", due))
    waker = FakeWaker()
    scheduler = Scheduler(store=store, waker=waker, output=output, zone=ZoneInfo("UTC"), max_lateness_s=3600)
    try:
        await scheduler.start()
        await scheduler.fire(wait.id)
    finally:
        await scheduler.stop()
    assert waker.submits == [(KEY, "[wait elapsed: check CI]")]
    (item,) = (await store.open_inbox())[KEY]
    assert item.text == "[wait elapsed: check CI]" and item.pending


async def _settled(store: Store) -> None:
    """The store is not observable; the poster settles right after the edge answers, so this is short."""
    while await store.owed_reminder_posts():  # noqa: ASYNC110 - the store has no change event to wait on
        await asyncio.sleep(0.01)
