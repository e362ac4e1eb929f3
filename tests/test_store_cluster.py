"""What only a cluster asks of the PostgreSQL store (bot/store/cluster.py): the rings' log, what gone
replicas leave behind (open calls, owed posts), and the backstop's question of what nobody takes up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from bot.cluster.jobs import ThreadJobs
from bot.store import NewReminder, OwedEdit, ReminderKind, ReminderStatus
from bot.store.postgres import PostgresStore
from bot.toolcall import CallStatus, ToolCall

KEY = "slack:T1:C1:1.0"


async def add_replica(dsn: str, replica: str, state: str = "alive") -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("INSERT INTO replicas (id, host, pid, state) VALUES (%s, 'h', 1, %s)", (replica, state))


async def set_state(dsn: str, replica: str, state: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("UPDATE replicas SET state = %s WHERE id = %s", (state, replica))


@pytest.fixture
async def stores(pg_jobs_dsn: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two replicas' stores, "gone" and "here", both alive to begin with."""
    await (await PostgresStore.open(pg_jobs_dsn)).close()  # migrated, as a replica's start leaves it
    for replica in ("gone", "here"):
        await add_replica(pg_jobs_dsn, replica)
    gone = await PostgresStore.open(pg_jobs_dsn, replica="gone")
    here = await PostgresStore.open(pg_jobs_dsn, replica="here")
    await gone.ensure_session(KEY)
    try:
        yield gone, here
    finally:
        await gone.close()
        await here.close()


def call(call_id: str, status: CallStatus = CallStatus.RUNNING) -> ToolCall:
    return ToolCall(id=call_id, session_key=KEY, turn_id="t1", tool_name="sleep_for", input={}, status=status)


async def test_rings_are_logged_replayed_after_a_floor_and_pruned(stores: tuple[PostgresStore, PostgresStore]) -> None:
    _, here = stores
    assert await here.last_ring_id() == 0
    async with here.transaction() as conn:
        first = await here.add_ring(conn, "cancel", KEY, {"by": "U1"})
        second = await here.add_ring(conn, "input", KEY, {})
    assert await here.last_ring_id() == second
    assert [(r.id, r.kind, r.body) for r in await here.recent_rings(60, after_id=first)] == [(second, "input", {})]
    await here.prune_rings(0)
    assert await here.recent_rings(60, after_id=0) == []


async def test_a_dead_replicas_open_calls_are_orphaned_by_any_reap_and_only_once(
    stores: tuple[PostgresStore, PostgresStore], pg_jobs_dsn: str
) -> None:
    gone, here = stores
    await gone.save_calls([call("c1"), call("c2", CallStatus.COMPLETED)])
    await here.save_calls([call("c3")])
    assert await here.orphan_dead_calls() == []  # nobody is dead yet
    await set_state(pg_jobs_dsn, "gone", "dead")
    assert [c.id for c in await here.orphan_dead_calls()] == ["c1"]
    assert await here.orphan_dead_calls() == []
    assert (await here.load_call("c3")).status is CallStatus.RUNNING  # type: ignore[union-attr]


async def test_what_a_gone_replica_owed_slack_is_adopted_once(
    stores: tuple[PostgresStore, PostgresStore], pg_jobs_dsn: str
) -> None:
    gone, here = stores
    await gone.owe_post(KEY, "C1", "1.0", "the answer")
    await gone.owe_edits([OwedEdit(KEY, "C1", "2.0", "✅ done", None)])
    [reminder] = await gone.add_reminders([NewReminder(KEY, ReminderKind.REMINDER, "stretch", datetime.now(UTC))])
    await gone.claim_reminder(reminder.id, due_at=reminder.due_at, outcome=ReminderStatus.FIRED, owed="stretch")
    assert await here.owed_messages() == []
    assert await here.adopt_owed() == []  # it is alive: its debts are its own
    await set_state(pg_jobs_dsn, "gone", "stopped")
    posts = await here.adopt_owed()
    assert [m.text for m in posts] == ["the answer", "✅ done", "stretch"], "oldest first"
    assert [m.line.text for m in posts if m.line is not None] == ["stretch"], "the reminder's post, one outbox"
    assert await here.adopt_owed() == []
    assert [m.text for m in await here.owed_messages()] == ["the answer", "✅ done", "stretch"]


async def test_unattended_sessions_are_those_owed_something_with_no_job(
    stores: tuple[PostgresStore, PostgresStore], pg_jobs_dsn: str
) -> None:
    _, here = stores
    item = await here.claim_message(["msg:C1:1.0"], KEY, "hello", address={})
    assert item is not None
    assert await here.unattended_sessions(0) == [KEY]
    async with ThreadJobs(dsn=pg_jobs_dsn, run=lambda session_key: _never(), worker_name="t") as jobs:
        await jobs.offer(KEY)
        assert await here.unattended_sessions(0) == []  # its job will take it up
    await here.give_up_inbox(KEY)
    async with await psycopg.AsyncConnection.connect(pg_jobs_dsn, autocommit=True) as conn:
        await conn.execute("DELETE FROM procrastinate_jobs")
    assert await here.unattended_sessions(0) == []
    late = call("late", CallStatus.COMPLETED)
    late.completed_at = datetime.now(UTC) - timedelta(seconds=1)
    await here.save_calls([late])  # a result that outlived its turn, never delivered
    assert await here.unattended_sessions(0) == [KEY]


async def test_a_message_whose_files_are_read_is_unattended_only_past_its_deadline(
    stores: tuple[PostgresStore, PostgresStore], pg_jobs_dsn: str
) -> None:
    _, here = stores
    soon = datetime.now(UTC) + timedelta(minutes=2)
    item = await here.claim_message(["msg:C1:1.0"], KEY, "see file", address={}, reading_until=soon)
    assert item is not None
    await here.claim_message(["msg:C1:2.0"], KEY, "and this", address={})  # waits for the one before it
    assert await here.unattended_sessions(0) == []  # its replica is reading the files: no job yet, on purpose
    offered = []

    async def then(conn: psycopg.AsyncConnection[Any]) -> None:
        offered.append(await (await conn.execute("SELECT count(*) FROM inbox WHERE reading_until IS NULL")).fetchone())

    assert await here.revise_message(item.id, "see file", [{"type": "text", "text": "[file a.md]"}], then=then)
    assert offered == [(2,)]  # the hook ran in the revise's transaction, the row already whole
    assert await here.unattended_sessions(0) == [KEY]
    past = datetime.now(UTC) - timedelta(seconds=1)
    await here.claim_message(["msg:C2:1.0"], "other", "late file", address={}, reading_until=past)
    assert sorted(await here.unattended_sessions(0)) == sorted([KEY, "other"])  # its replica died reading


async def test_gone_replicas_that_owe_nothing_are_forgotten(
    stores: tuple[PostgresStore, PostgresStore], pg_jobs_dsn: str
) -> None:
    gone, here = stores
    await gone.owe_post(KEY, "C1", "1.0", "still owed")
    await set_state(pg_jobs_dsn, "gone", "dead")
    await here.prune_replicas(0)
    async with await psycopg.AsyncConnection.connect(pg_jobs_dsn, autocommit=True) as conn:
        cursor = await conn.execute("SELECT id FROM replicas ORDER BY id")
        assert await cursor.fetchall() == [("gone",), ("here",)]  # it still owes a post
        await here.adopt_owed()
        await here.prune_replicas(0)
        cursor = await conn.execute("SELECT id FROM replicas ORDER BY id")
        assert await cursor.fetchall() == [("here",)]


async def _never() -> None:
    raise AssertionError("no worker runs in these tests")
