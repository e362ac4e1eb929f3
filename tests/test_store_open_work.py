"""A person's open work in the store (App Home's reads), on each back end, and the same after a reopen."""

from __future__ import annotations

from datetime import timedelta

from store_backends import StoreOpener

from bot.clock import utcnow
from bot.store import NewReminder, ReminderKind, Store
from bot.store.open_work import ThreadState
from bot.toolcall import CallStatus, Decision, ToolCall
from bot.types import Usage


def _address(channel: str, ts: str, user: str) -> dict[str, str]:
    return {"edge": "slack", "team": "T1", "channel": channel, "thread_ts": ts, "requester": user, "speaker": user}


async def _two_people(store: Store) -> None:
    """U1: a running call and an approval that waits in one thread, a wait in another, a finished call;
    U2: a call and a reminder of their own."""
    await store.ensure_session("s:busy", _address("C1", "1.1", "U1"))
    await store.ensure_session("s:waiting", _address("C1", "2.2", "U1"))
    await store.ensure_session("s:idle", _address("D1", "3.3", "U1"))
    await store.ensure_session("s:other", _address("C2", "4.4", "U2"))
    running = ToolCall("toolu_run", "s:busy", "t1", "sleep_for", {"seconds": 60}, requester="U1")
    running.transition(CallStatus.RUNNING)
    asked = ToolCall(
        "toolu_ask", "s:busy", "t1", "run_command", {"command": "ls"}, requester="U1", decision=Decision.ASKED
    )
    done = ToolCall("toolu_done", "s:idle", "t0", "now", {}, requester="U1")
    done.transition(CallStatus.RUNNING)
    done.transition(CallStatus.COMPLETED)
    theirs = ToolCall("toolu_u2", "s:other", "t2", "sleep_for", {"seconds": 5}, requester="U2")
    await store.save_calls([running, asked, done, theirs])
    soon = utcnow() + timedelta(minutes=5)
    await store.add_reminders(
        [
            NewReminder("s:waiting", ReminderKind.WAKE, "check the build", soon, requester="U1"),
            NewReminder("s:idle", ReminderKind.REMINDER, "stretch", soon + timedelta(minutes=1), requester="U1"),
            NewReminder("s:other", ReminderKind.REMINDER, "lunch", soon, requester="U2"),
        ]
    )
    await store.append_messages("s:idle", [{"role": "user", "content": "hi"}])
    await store.record_usage(session_key="s:busy", turn_id="t1", model="m", usage=Usage(10, 5), requester="U1")
    await store.record_usage(session_key="s:other", turn_id="t2", model="m", usage=Usage(99, 1), requester="U2")


async def test_a_persons_open_work_is_theirs_alone(any_store: Store) -> None:
    await _two_people(any_store)
    calls = await any_store.open_calls_of("U1")
    assert [call.id for call in calls] == ["toolu_run", "toolu_ask"]
    assert calls[1].awaiting_approval
    reminders = await any_store.pending_reminders_of("U1")
    assert [(r.kind, r.text) for r in reminders] == [
        (ReminderKind.WAKE, "check the build"),
        (ReminderKind.REMINDER, "stretch"),
    ]
    threads = {t.session_key: t.state for t in await any_store.recent_threads_of("U1", limit=10)}
    assert threads == {"s:busy": ThreadState.WORKING, "s:waiting": ThreadState.WAITING, "s:idle": ThreadState.IDLE}
    assert [t.session_key for t in await any_store.recent_threads_of("U1", limit=1)] == ["s:idle"]  # its message
    week = utcnow() - timedelta(days=7)
    assert await any_store.model_calls_since(week, requester="U1") == 1
    assert await any_store.tokens_since(week, requester="U1") == 15
    assert [call.id for call in await any_store.open_calls_of("U2")] == ["toolu_u2"]


async def test_a_reopened_store_shows_the_same_work(store_opener: StoreOpener) -> None:
    first = await store_opener()
    await _two_people(first)
    before = (await first.open_calls_of("U1"), await first.pending_reminders_of("U1"))
    await store_opener.close(first)
    again = await store_opener()
    assert (await again.open_calls_of("U1"), await again.pending_reminders_of("U1")) == before
