"""The reminders table: add, list per session, and the claims that make a fire happen once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from store_backends import StoreOpener

from bot.store import NewReminder, ReminderKind, ReminderStatus, Store

A, B = "test:a", "test:b"
DUE = datetime(2026, 5, 1, 7, tzinfo=UTC)


@pytest.fixture
async def store(any_store: Store) -> Store:
    """Once per back end (SQLite, PostgreSQL): the reminder half of the store's contract."""
    await any_store.ensure_session(A, {"requester": "U1"})
    await any_store.ensure_session(B)
    return any_store


def one_shot(key: str = A, due: datetime = DUE, text: str = "stand-up") -> NewReminder:
    return NewReminder(key, ReminderKind.REMINDER, text, due, requester="U1")


async def test_add_and_read_back(store: Store) -> None:
    added = await store.add_reminder(NewReminder(A, ReminderKind.WAKE, "check CI", DUE, cron=None, zone="UTC"))
    assert added.id > 0 and added.status is ReminderStatus.PENDING and added.due_at == DUE
    assert await store.get_reminder(added.id) == added
    assert added.job_id == f"reminder:{added.id}"


async def test_unknown_session_is_refused_and_nothing_is_added(store: Store) -> None:
    with pytest.raises(KeyError):
        await store.add_reminders([one_shot(), one_shot(key="test:nobody")])
    assert await store.pending_reminders() == []


async def test_pending_is_soonest_first_and_per_session(store: Store) -> None:
    later, sooner, other = await store.add_reminders(
        [one_shot(due=DUE + timedelta(hours=1)), one_shot(), one_shot(key=B)]
    )
    assert [r.id for r in await store.pending_reminders()] == [sooner.id, other.id, later.id]
    assert [r.id for r in await store.pending_reminders(A)] == [sooner.id, later.id]
    assert [r.id for r in await store.pending_reminders(B)] == [other.id]


async def test_a_claim_wins_once(store: Store) -> None:
    reminder = await store.add_reminder(one_shot())
    claims = await asyncio.gather(
        *(store.claim_reminder(reminder.id, due_at=DUE, outcome=ReminderStatus.FIRED) for _ in range(5))
    )
    assert sum(claim is not None for claim in claims) == 1
    stored = await store.get_reminder(reminder.id)
    assert stored is not None and stored.status is ReminderStatus.FIRED and stored.fired_at is not None
    assert await store.pending_reminders() == []


async def test_a_claim_for_another_due_time_loses(store: Store) -> None:
    reminder = await store.add_reminder(one_shot())
    assert (
        await store.claim_reminder(reminder.id, due_at=DUE + timedelta(seconds=1), outcome=ReminderStatus.FIRED) is None
    )


async def test_missed_keeps_no_fired_time(store: Store) -> None:
    reminder = await store.add_reminder(one_shot())
    missed = await store.claim_reminder(reminder.id, due_at=DUE, outcome=ReminderStatus.MISSED)
    assert missed is not None and missed.status is ReminderStatus.MISSED and missed.fired_at is None
    with pytest.raises(ValueError, match="fired or missed"):
        await store.claim_reminder(reminder.id, due_at=DUE, outcome=ReminderStatus.CANCELLED)


async def test_cron_rows_advance_once_per_run(store: Store) -> None:
    cron = await store.add_reminder(NewReminder(A, ReminderKind.REMINDER, "weekly", DUE, cron="0 9 * * 5", zone="UTC"))
    nxt = DUE + timedelta(days=7)
    results = await asyncio.gather(
        *(store.advance_reminder(cron.id, due_at=DUE, next_due_at=nxt, fired_at=DUE) for _ in range(3))
    )
    assert sum(result is not None for result in results) == 1
    stored = await store.get_reminder(cron.id)
    assert stored is not None and stored.status is ReminderStatus.PENDING and stored.due_at == nxt
    # A cron row is never claimed as a one-shot, nor a one-shot advanced.
    assert await store.claim_reminder(cron.id, due_at=nxt, outcome=ReminderStatus.FIRED) is None
    single = await store.add_reminder(one_shot())
    assert await store.advance_reminder(single.id, due_at=DUE, next_due_at=nxt, fired_at=None) is None


async def test_a_cron_row_with_no_run_ahead_ends_once(store: Store) -> None:
    cron = await store.add_reminder(NewReminder(A, ReminderKind.REMINDER, "last", DUE, cron="0 9 * * 5", zone="UTC"))
    results = await asyncio.gather(
        *(store.end_cron_reminder(cron.id, due_at=DUE, outcome=ReminderStatus.FIRED, at=DUE) for _ in range(3))
    )
    assert sum(result is not None for result in results) == 1
    ended = await store.get_reminder(cron.id)
    assert ended is not None and ended.status is ReminderStatus.FIRED and ended.fired_at == DUE
    assert await store.pending_reminders() == []
    single = await store.add_reminder(one_shot())  # a one-shot is claimed, never ended as a cron
    assert await store.end_cron_reminder(single.id, due_at=DUE, outcome=ReminderStatus.FIRED, at=DUE) is None
    with pytest.raises(ValueError, match="fired or missed"):
        await store.end_cron_reminder(single.id, due_at=DUE, outcome=ReminderStatus.CANCELLED, at=DUE)


async def test_cancel_only_in_its_own_session(store: Store) -> None:
    reminder = await store.add_reminder(one_shot())
    assert await store.cancel_reminder(reminder.id, session_key=B) is None
    cancelled = await store.cancel_reminder(reminder.id, session_key=A)
    assert cancelled is not None and cancelled.status is ReminderStatus.CANCELLED
    assert await store.cancel_reminder(reminder.id, session_key=A) is None  # final stays final
    assert await store.claim_reminder(reminder.id, due_at=DUE, outcome=ReminderStatus.FIRED) is None


async def test_rows_survive_reopening(store_opener: StoreOpener) -> None:
    first = await store_opener()
    await first.ensure_session(A)
    added = await first.add_reminder(one_shot())
    await store_opener.close(first)
    second = await store_opener()
    assert await second.pending_reminders() == [added]
