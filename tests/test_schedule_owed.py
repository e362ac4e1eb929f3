"""What a firing says in its thread is owed by its claim: a reminder's post, a missed one's notice, a wait's note.

Nothing the scheduler decides to say lives only in memory: the claim writes it (the outbox for lines, the inbox for
a wait's note) in the transaction that marks the reminder fired or missed, before any edge hears of it. An edge that
shows a line at once (a terminal) has it settled; one that delivers later (Slack's outbox) settles it itself.
"""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from conftest import RecordingOutput
from schedule_support import FakeWaker

from bot.clock import utcnow
from bot.schedule import Scheduler
from bot.store import NewReminder, ReminderKind, ReminderStatus, Store, WakeLimit
from bot.types import LineKind, OwedLine

KEY = "test:owed"


class KeepingOutput(RecordingOutput):
    """An edge that delivers lines later, as Slack's outbox does: it settles them itself, so they stay owed here."""

    def lines_owed(self, lines: list[tuple[int, OwedLine]]) -> bool:
        super().lines_owed(lines)
        return False


@pytest.fixture
async def store(any_store: Store) -> Store:
    """Once per back end (SQLite, PostgreSQL): what a claim owes is store state like any other."""
    await any_store.ensure_session(KEY, {"requester": "U1"})
    return any_store


def scheduler_for(store: Store, output: RecordingOutput, waker: FakeWaker | None = None) -> Scheduler:
    return Scheduler(store=store, waker=waker or FakeWaker(), output=output, zone=ZoneInfo("UTC"), max_lateness_s=60)


async def owed_lines(store: Store) -> list[OwedLine]:
    return [message.line for message in await store.owed_messages() if message.line is not None]


async def test_the_claim_owes_the_post_once(store: Store) -> None:
    due = utcnow()
    reminder = await store.add_reminder(NewReminder(KEY, ReminderKind.REMINDER, "stand-up", due, requester="U1"))
    won = await store.claim_reminder(reminder.id, due_at=due, outcome=ReminderStatus.FIRED, owed="stand-up")
    again = await store.claim_reminder(reminder.id, due_at=due, outcome=ReminderStatus.FIRED, owed="stand-up")
    assert won is not None and again is None
    [(line_id, line)] = won.owed_lines
    assert line == OwedLine(KEY, LineKind.REMINDER, "stand-up", "U1")
    assert [(m.id, m.channel, m.line) for m in await store.owed_messages()] == [(line_id, None, line)]


async def test_a_missed_reminder_owes_its_notice_with_the_claim(store: Store) -> None:
    """Not once the edge's queue reaches it: a kill right after the claim still leaves the notice owed."""
    output = KeepingOutput()
    scheduler = scheduler_for(store, output)
    reminder = await scheduler.add(
        session_key=KEY, kind=ReminderKind.REMINDER, text="stretch", due_at=utcnow() - timedelta(hours=1)
    )
    report = await scheduler.fire(reminder.id)
    assert not report.delivered
    [line] = await owed_lines(store)
    assert line.kind is LineKind.NOTICE and line.text.startswith("⏰ A reminder was missed") and "stretch" in line.text
    assert [text for _, text in output.notices] == [line.text]


async def test_lines_a_terminal_showed_are_settled_and_others_stay_owed(store: Store) -> None:
    shown, kept = RecordingOutput(), KeepingOutput()
    for output in (shown, kept):
        scheduler = scheduler_for(store, output)
        reminder = await scheduler.add(session_key=KEY, kind=ReminderKind.REMINDER, text="tea", due_at=utcnow())
        assert (await scheduler.fire(reminder.id)).delivered
    assert shown.reminders == kept.reminders == [(KEY, "tea")]
    assert await owed_lines(store) == [OwedLine(KEY, LineKind.REMINDER, "tea", "U1")], "only the kept one"


async def test_a_wait_refused_by_the_days_limit_owes_its_refusal(store: Store) -> None:
    due = utcnow()
    wait = await store.add_reminder(NewReminder(KEY, ReminderKind.WAKE, "check CI", due))
    limit = WakeLimit(0, due - timedelta(days=1), refusal="🚦 not today")
    claimed = await store.claim_reminder(
        wait.id, due_at=due, outcome=ReminderStatus.FIRED, owed="[wait elapsed: check CI]", wake_limit=limit
    )
    assert claimed is not None and claimed.status is ReminderStatus.MISSED and claimed.inbox_id is None
    assert [line for _, line in claimed.owed_lines] == [OwedLine(KEY, LineKind.NOTICE, "🚦 not today")]
    assert await store.open_inbox() == {}


async def test_a_claimed_wait_is_owed_to_its_session(store: Store, output: RecordingOutput) -> None:
    """A wait's note goes to the inbox with its claim, so a crash before the turn stores it loses nothing."""
    wait = await store.add_reminder(NewReminder(KEY, ReminderKind.WAKE, "check CI", utcnow() - timedelta(seconds=1)))
    waker = FakeWaker()
    scheduler = scheduler_for(store, output, waker)
    await scheduler.fire(wait.id)
    assert waker.submits == [(KEY, "[wait elapsed: check CI]")]
    (item,) = (await store.open_inbox())[KEY]
    assert item.text == "[wait elapsed: check CI]" and item.pending
    assert await owed_lines(store) == []
