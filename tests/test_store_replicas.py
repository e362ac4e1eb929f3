"""The store under several writers at once (replicas on one PostgreSQL database, processes on one SQLite file),
and what only PostgreSQL does: write fencing, `transaction()`, work run inside a claim, calls by replica."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from store_backends import StoreOpener

from bot.errors import FencedError, StoreError
from bot.store import NewReminder, ReminderKind, ReminderStatus, SqliteStore, Store
from bot.store.pg_schema import MIGRATIONS
from bot.store.postgres import PostgresStore
from bot.toolcall import CallStatus, ToolCall

KEY = "slack:T1:C1:1.0"
DUE = datetime(2026, 5, 1, 7, tzinfo=UTC)
WRITERS = 4


async def writers(store_opener: StoreOpener) -> list[Store]:
    """WRITERS stores on one database: PostgreSQL pools, or SQLite connections to one file."""
    return [await store_opener() for _ in range(WRITERS)]


def call(call_id: str, status: CallStatus = CallStatus.RUNNING) -> ToolCall:
    return ToolCall(id=call_id, session_key=KEY, turn_id="t1", tool_name="shell", input={}, status=status)


async def test_racing_claimers_fire_each_reminder_exactly_once(store_opener: StoreOpener) -> None:
    stores = await writers(store_opener)
    await stores[0].ensure_session(KEY)
    items = [NewReminder(KEY, ReminderKind.REMINDER, f"r{n}", DUE) for n in range(10)]
    reminders = await stores[0].add_reminders(items)
    claims = [
        store.claim_reminder(reminder.id, due_at=DUE, outcome=ReminderStatus.FIRED, owed=reminder.text)
        for reminder in reminders
        for store in stores
    ]
    won = [claimed for claimed in await asyncio.gather(*claims) if claimed is not None]
    assert Counter(claimed.id for claimed in won) == {reminder.id: 1 for reminder in reminders}
    owed = [m.line.text for m in await stores[1].owed_messages() if m.line is not None]
    assert sorted(owed) == sorted(i.text for i in items), "each claim owed its post once, in the outbox"
    assert await stores[2].pending_reminders() == []


async def test_racing_cron_advances_move_each_run_once(store_opener: StoreOpener) -> None:
    stores = await writers(store_opener)
    await stores[0].ensure_session(KEY)
    cron = await stores[0].add_reminder(
        NewReminder(KEY, ReminderKind.REMINDER, "daily", DUE, cron="0 7 * * *", zone="UTC")
    )
    nxt = DUE.replace(day=2)
    moves = [s.advance_reminder(cron.id, due_at=DUE, next_due_at=nxt, fired_at=DUE, owed="daily") for s in stores]
    assert sum(moved is not None for moved in await asyncio.gather(*moves)) == 1
    assert len([m for m in await stores[3].owed_messages() if m.line is not None]) == 1


async def test_a_message_claimed_by_every_writer_at_once_is_owned_by_one(store_opener: StoreOpener) -> None:
    stores = await writers(store_opener)
    claims = [
        store.claim_message([f"event:E{n}:{i}", f"msg:C1:{n}.0"], KEY, f"m{n}", address={"by": i})
        for n in range(8)
        for i, store in enumerate(stores)
    ]
    items = [item for item in await asyncio.gather(*claims) if item is not None]
    assert sorted(item.text for item in items) == [f"m{n}" for n in range(8)]
    assert sorted(item.text for item in (await stores[0].open_inbox())[KEY]) == [f"m{n}" for n in range(8)]


async def test_appends_to_one_session_from_every_writer_never_interleave(store_opener: StoreOpener) -> None:
    stores = await writers(store_opener)
    await stores[0].ensure_session(KEY)
    appends = [
        store.append_messages(
            KEY, [{"role": "user", "content": f"{i}.{n}a"}, {"role": "assistant", "content": f"{i}.{n}b"}]
        )
        for n in range(5)
        for i, store in enumerate(stores)
    ]
    await asyncio.gather(*appends)
    body = [message["content"] for message in await stores[1].load_messages(KEY)]
    assert len(body) == 2 * 5 * WRITERS
    assert all(body[i][:-1] == body[i + 1][:-1] for i in range(0, len(body), 2))  # whole pairs, in seq order


async def test_sqlite_refuses_work_inside_a_claim(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "bot.db")

    async def then(conn: psycopg.AsyncConnection[Any]) -> None:
        raise AssertionError("never run")

    try:
        with pytest.raises(StoreError, match="PostgreSQL"):
            await store.claim_message(["msg:1"], KEY, "hi", address={}, then=then)
        assert await store.claim_event("msg:1")  # the claim was rolled back with it: the key is new
    finally:
        await store.close()


# --- PostgreSQL only ---------------------------------------------------------------------------------


@pytest.fixture
async def pg(pg_dsn: str) -> AsyncIterator[Callable[..., Awaitable[PostgresStore]]]:
    """Opens PostgresStores on this test's schema (migrated by the first one); closes them at the end."""
    opened: list[PostgresStore] = []

    async def open_(replica: str | None = None) -> PostgresStore:
        store = await PostgresStore.open(pg_dsn, replica=replica, require_jobs_schema=False)
        opened.append(store)
        return store

    try:
        yield open_
    finally:
        for store in opened:
            await store.close()


async def test_replicas_starting_at_once_migrate_once(pg_dsn: str) -> None:
    stores = await asyncio.gather(
        *(PostgresStore.open(pg_dsn, require_jobs_schema=False, max_size=2) for _ in range(WRITERS))
    )
    try:
        async with stores[0].transaction() as conn:
            rows = await (await conn.execute("SELECT version FROM threadbot_schema_version")).fetchall()
        assert rows == [(version,) for version in range(1, len(MIGRATIONS) + 1)]
    finally:
        for store in stores:
            await store.close()


async def set_replica(store: PostgresStore, replica: str, state: str) -> None:
    async with store.transaction() as conn:
        await conn.execute(
            "INSERT INTO replicas (id, host, pid, state) VALUES (%s, 'h', 1, %s)"
            " ON CONFLICT (id) DO UPDATE SET state = excluded.state",
            (replica, state),
        )


async def test_a_replica_declared_dead_can_no_longer_write(pg: Callable[..., Awaitable[PostgresStore]]) -> None:
    admin = await pg()
    fenced = await pg(replica="r1")
    with pytest.raises(FencedError, match="r1"):
        await fenced.ensure_session(KEY)  # no row yet: not a member
    await set_replica(admin, "r1", "alive")
    await fenced.ensure_session(KEY)
    await set_replica(admin, "r1", "stopping")
    assert await fenced.next_turn(KEY) == 1  # a stopping replica still finishes its work
    await set_replica(admin, "r1", "dead")
    with pytest.raises(FencedError):
        await fenced.next_turn(KEY)
    assert (await fenced.get_session(KEY)) is not None  # reads are not fenced
    assert (await admin.get_session(KEY)).turn_count == 1  # type: ignore[union-attr]


async def test_open_calls_are_orphaned_per_replica(pg: Callable[..., Awaitable[PostgresStore]]) -> None:
    admin = await pg()
    for replica in ("a", "b"):
        await set_replica(admin, replica, "alive")
    a, b = await pg(replica="a"), await pg(replica="b")
    await admin.ensure_session(KEY)
    await a.save_calls([call("a1"), call("a2", CallStatus.PENDING), call("a3", CallStatus.COMPLETED)])
    await b.save_call(call("b1"))
    assert await admin.orphan_open_calls([]) == []
    assert sorted(c.id for c in await admin.orphan_open_calls(["a", "gone"])) == ["a1", "a2"]
    assert [c.id for c in await admin.session_calls(KEY, only_open=True)] == ["b1"]
    assert [c.id for c in await admin.orphan_open_calls()] == ["b1"]


async def test_transaction_carries_a_callers_sql_with_the_stores(pg: Callable[..., Awaitable[PostgresStore]]) -> None:
    store = await pg()
    async with store.transaction() as conn:
        await conn.execute("CREATE TABLE jobs (name TEXT)")
    with pytest.raises(RuntimeError):
        async with store.transaction() as conn:
            await conn.execute("INSERT INTO jobs VALUES ('lost')")
            raise RuntimeError("rolled back")
    async with store.transaction() as conn:
        await conn.execute("INSERT INTO jobs VALUES ('kept')")
        rows = await (await conn.execute("SELECT name FROM jobs")).fetchall()
    assert rows == [("kept",)]


async def test_work_inside_a_claim_commits_with_it(pg: Callable[..., Awaitable[PostgresStore]]) -> None:
    store = await pg()
    async with store.transaction() as conn:
        await conn.execute("CREATE TABLE jobs (inbox_count BIGINT)")

    async def then(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute("INSERT INTO jobs SELECT COUNT(*) FROM inbox")  # sees the claim's own row

    assert await store.claim_message(["msg:1"], KEY, "hi", address={}, then=then) is not None
    assert await store.claim_message(["msg:1"], KEY, "hi", address={}, then=then) is None  # a repeat queues nothing
    async with store.transaction() as conn:
        rows = await (await conn.execute("SELECT inbox_count FROM jobs")).fetchall()
    assert rows == [(1,)]
