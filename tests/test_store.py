"""The store's contract on both back ends (persistence, dedup, concurrency, the one-way call status),
and SQLite's own file handling and migrations."""

from __future__ import annotations

import asyncio
import os
import random
import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from store_backends import StoreOpener

from bot.errors import StoreError
from bot.store import SessionRecord, SqliteStore, Store, schema
from bot.toolcall import CallStatus, ProgressKind, ToolCall

KEY = "slack:T1:C1:1700000000.000100"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "threadbot.db"


@pytest.fixture
def store(any_store: Store) -> Store:
    """Every test taking `store` runs once per back end (SQLite, PostgreSQL): the store's contract."""
    return any_store


def make_call(call_id: str, key: str = KEY, **fields: object) -> ToolCall:
    return ToolCall(id=call_id, session_key=key, turn_id="turn-1", tool_name="shell", input={"cmd": "ls"}, **fields)  # type: ignore[arg-type]


def read_sql(path: Path, sql: str) -> list[tuple[object, ...]]:
    """Look at the file with the stdlib driver, as an outsider would (after the store is closed)."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


# --- opening, persistence and migrations ---------------------------------------------------


async def test_open_creates_parent_directory_and_sets_wal(db_path: Path) -> None:
    store = await SqliteStore.open(db_path)
    await store.close()
    assert read_sql(db_path, "PRAGMA journal_mode") == [("wal",)]
    assert read_sql(db_path, "PRAGMA user_version") == [(len(schema.MIGRATIONS),)]


async def test_everything_survives_close_and_reopen(store_opener: StoreOpener) -> None:
    store = await store_opener()
    await store.ensure_session(KEY, {"channel": "C1", "thread_ts": "1700000000.000100"})
    await store.update_address(KEY, {"requester": "U1"})
    assert await store.next_turn(KEY) == 1
    await store.add_alias("slack:T1:C1:1700000001.000200", KEY)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "héllo ✓"},
        {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
    ]
    await store.append_messages(KEY, messages)
    call = make_call("toolu_1", status=CallStatus.RUNNING, started_at=datetime.now(UTC))
    call.add_progress(ProgressKind.LOG, "line 1")
    await store.save_call(call)
    assert await store.claim_event("Ev1")
    await store_opener.close(store)

    store = await store_opener()
    session = await store.get_session(KEY)
    assert session is not None
    assert session.address == {"channel": "C1", "thread_ts": "1700000000.000100", "requester": "U1"}
    assert session.turn_count == 1
    assert session.created_at.tzinfo is not None
    assert await store.resolve("slack:T1:C1:1700000001.000200") == KEY
    assert await store.load_messages(KEY) == messages
    loaded = await store.load_call("toolu_1")
    assert loaded is not None
    assert loaded.to_record() == call.to_record()
    assert not await store.claim_event("Ev1")
    assert await store.next_turn(KEY) == 2


async def test_a_version_4_file_gains_the_replica_column_and_keeps_its_calls(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:4])
    old = await SqliteStore.open(db_path)
    await old.ensure_session(KEY)
    monkeypatch.undo()
    await old.close()
    conn = sqlite3.connect(db_path)
    conn.execute(
        "INSERT INTO tool_calls (id, session_key, turn_id, tool_name, input, status, created_at)"
        " VALUES ('toolu_1', ?, 't', 'shell', '{}', 'running', '2024-01-01T00:00:00.000000+00:00')",
        (KEY,),
    )
    conn.commit()
    conn.close()
    assert "replica" not in {row[1] for row in read_sql(db_path, "PRAGMA table_info(tool_calls)")}
    store = await SqliteStore.open(db_path)
    try:
        assert [c.id for c in await store.orphan_open_calls()] == ["toolu_1"]
    finally:
        await store.close()
    assert read_sql(db_path, "SELECT replica FROM tool_calls") == [(None,)]
    assert read_sql(db_path, "PRAGMA user_version") == [(len(schema.MIGRATIONS),)]


async def test_a_version_6_file_moves_its_owed_reminder_posts_into_the_outbox(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One outbox: what the old reminder-post table still owed is owed there, and no post id is ever reused
    (a new post with a settled one's id would carry its Slack marker, and be taken for it)."""
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:6])
    old = await SqliteStore.open(db_path)
    await old.ensure_session(KEY, {"edge": "slack", "channel": "C1", "thread_ts": "1.0"})
    for text in ("kept", "settled"):
        await old.owe_post(KEY, "C1", "1.0", text)
    await old.settle_post(2)
    monkeypatch.undo()
    await old.close()
    conn = sqlite3.connect(db_path)
    due = "2024-01-01T00:00:00.000000+00:00"
    for rid, state in ((1, "owed"), (2, "posted")):
        conn.execute(
            "INSERT INTO reminders (id, session_key, kind, text, requester, due_at, status, created_at)"
            " VALUES (?, ?, 'reminder', ?, 'U1', ?, 'fired', ?)",
            (rid, KEY, f"stretch {rid}", due, due),
        )
        conn.execute(
            "INSERT INTO reminder_posts (reminder_id, due_at, text, claimed_at, state) VALUES (?, ?, ?, ?, ?)",
            (rid, due, f"stretch {rid}", due, state),
        )
    conn.commit()
    conn.close()
    store = await SqliteStore.open(db_path)
    try:
        owed = await store.owed_messages()
        assert [(m.id, m.text, m.channel) for m in owed] == [(1, "kept", "C1"), (3, "stretch 1", None)]
        assert owed[1].line is not None and owed[1].line.requester == "U1"
        assert await store.owe_post(KEY, "C1", "1.0", "new") == 4
    finally:
        await store.close()
    assert read_sql(db_path, "SELECT name FROM sqlite_master WHERE name = 'reminder_posts'") == []
    assert read_sql(db_path, "PRAGMA user_version") == [(len(schema.MIGRATIONS),)]


async def test_reopening_does_not_rerun_migrations(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await (await SqliteStore.open(db_path)).close()
    extra = "CREATE TABLE IF NOT EXISTS runs (n INTEGER); INSERT INTO runs VALUES (1);"
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, extra])
    for _ in range(3):
        await (await SqliteStore.open(db_path)).close()
    assert read_sql(db_path, "SELECT count(*) FROM runs") == [(1,)]
    assert read_sql(db_path, "PRAGMA user_version") == [(len(schema.MIGRATIONS),)]  # the extra one included


async def test_failed_migration_raises_and_keeps_last_good_version(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await (await SqliteStore.open(db_path)).close()
    good = len(schema.MIGRATIONS)
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, "CREATE TABLE half (x); THIS IS NOT SQL;"])
    with pytest.raises(StoreError, match=rf"cannot open database at .*: migration {good + 1} failed"):
        await SqliteStore.open(db_path)
    assert read_sql(db_path, "PRAGMA user_version") == [(good,)]
    assert read_sql(db_path, "SELECT name FROM sqlite_master WHERE name = 'half'") == []


async def test_database_newer_than_program_is_refused(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await (await SqliteStore.open(db_path)).close()
    read_sql(db_path, "PRAGMA user_version = 99")
    with pytest.raises(StoreError, match="newer"):
        await SqliteStore.open(db_path)


def write_garbage(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(os.urandom(8192))


async def test_garbage_file_raises_store_error(db_path: Path) -> None:
    write_garbage(db_path)
    with pytest.raises(StoreError, match=re.escape(f"cannot open database at {db_path}: ")):
        await SqliteStore.open(db_path)


async def test_unopenable_path_raises_store_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    with pytest.raises(StoreError, match="cannot open database at"):
        await SqliteStore.open(tmp_path / "a-file" / "threadbot.db")


# --- events --------------------------------------------------------------------------------


async def test_claim_event_only_once(store: Store) -> None:
    assert await store.claim_event("Ev1") is True
    assert await store.claim_event("Ev1") is False
    assert await store.claim_event("Ev2") is True
    results = await asyncio.gather(*(store.claim_event("Ev3") for _ in range(50)))
    assert results.count(True) == 1


async def test_prune_events_forgets_old_ones(store: Store) -> None:
    await store.claim_event("old")
    assert await store.prune_events(datetime.now(UTC) - timedelta(hours=1)) == 0
    assert await store.prune_events(datetime.now(UTC) + timedelta(seconds=1)) == 1
    assert await store.claim_event("old") is True


# --- sessions and aliases ----------------------------------------------------------------


async def test_ensure_session_keeps_an_existing_one_unchanged(store: Store) -> None:
    first = await store.ensure_session(KEY, {"channel": "C1"})
    assert isinstance(first, SessionRecord)
    assert (first.address, first.turn_count) == ({"channel": "C1"}, 0)
    again = await store.ensure_session(KEY, {"channel": "OTHER"})
    assert again == first
    assert await store.get_session("console:default") is None
    assert (await store.ensure_session("console:default")).address == {}


async def test_unknown_session_is_a_key_error(store: Store) -> None:
    with pytest.raises(KeyError):
        await store.update_address("nope", {"a": 1})
    with pytest.raises(KeyError):
        await store.append_messages("nope", [{"role": "user", "content": "x"}])
    with pytest.raises(KeyError):
        await store.save_call(make_call("toolu_x", key="nope"))
    with pytest.raises(KeyError):
        await store.add_alias("alias", "nope")
    assert await store.load_messages("nope") == []
    # The failed writes rolled back; the store still works.
    await store.ensure_session(KEY)
    assert await store.next_turn(KEY) == 1


async def test_aliases(store: Store) -> None:
    await store.ensure_session("heartbeat:default")
    await store.ensure_session(KEY)
    assert await store.resolve("heartbeat:default") == "heartbeat:default"
    assert await store.resolve("slack:T1:C9:1.2") is None
    await store.add_alias("slack:T1:C9:1.2", "heartbeat:default")
    await store.add_alias("slack:T1:C9:1.2", "heartbeat:default")  # idempotent
    await store.add_alias("heartbeat:default", "heartbeat:default")  # a key is trivially its own name
    assert await store.resolve("slack:T1:C9:1.2") == "heartbeat:default"
    with pytest.raises(ValueError, match="already names"):
        await store.add_alias("slack:T1:C9:1.2", KEY)
    with pytest.raises(ValueError, match="already a session key"):
        await store.add_alias(KEY, "heartbeat:default")
    assert await store.resolve("slack:T1:C9:1.2") == "heartbeat:default"


async def test_next_turn_under_concurrency_gives_distinct_numbers(store: Store) -> None:
    await store.ensure_session(KEY)
    numbers = await asyncio.gather(*(store.next_turn(KEY) for _ in range(100)))
    assert sorted(numbers) == list(range(1, 101))
    session = await store.get_session(KEY)
    assert session is not None and session.turn_count == 100


async def test_next_turn_creates_a_missing_session_and_keeps_an_existing_address(store: Store) -> None:
    assert await store.next_turn("console:default") == 1
    created = await store.get_session("console:default")
    assert created is not None and (created.address, created.turn_count) == ({}, 1)
    await store.ensure_session(KEY, {"channel": "C1"})
    assert await store.next_turn(KEY) == 1
    assert await store.next_turn(KEY) == 2
    kept = await store.get_session(KEY)
    assert kept is not None and (kept.address, kept.turn_count) == ({"channel": "C1"}, 2)


# --- messages ----------------------------------------------------------------------------


async def test_concurrent_appends_from_many_sessions_keep_every_row_in_order(store: Store) -> None:
    keys = [f"slack:T1:C1:{n}.000" for n in range(20)]
    for key in keys:
        await store.ensure_session(key)

    def batch(key: str, n: int) -> list[dict[str, object]]:
        return [
            {"role": "user", "content": f"{key} question {n}"},
            {"role": "assistant", "content": [{"type": "text", "text": f"{key} answer {n}"}]},
        ]

    jobs = [store.append_messages(key, batch(key, n)) for n in range(10) for key in keys]
    calls = [store.save_call(make_call(f"toolu_{i}", key=keys[i % 20])) for i in range(40)]
    await asyncio.gather(*jobs, *calls)

    for key in keys:
        assert await store.load_messages(key) == [m for n in range(10) for m in batch(key, n)]
        assert len(await store.session_calls(key)) == 2


async def test_concurrent_appends_in_random_order_are_never_split(store: Store) -> None:
    await store.ensure_session(KEY)
    batches = [[{"role": "user", "content": f"{n}a"}, {"role": "assistant", "content": f"{n}b"}] for n in range(200)]
    random.Random(7).shuffle(batches)
    await asyncio.gather(*(store.append_messages(KEY, b) for b in batches))
    loaded = await store.load_messages(KEY)
    assert len(loaded) == 400
    pairs = [(loaded[i]["content"], loaded[i + 1]["content"]) for i in range(0, 400, 2)]
    assert all(a[:-1] == b[:-1] and a.endswith("a") and b.endswith("b") for a, b in pairs)


# --- tool calls ----------------------------------------------------------------------------


async def test_final_status_is_never_overwritten(store: Store) -> None:
    await store.ensure_session(KEY)
    call = make_call("toolu_1")
    await store.save_call(call)
    stale = make_call("toolu_1")  # an in-flight copy someone still holds
    stale.transition(CallStatus.RUNNING)

    call.transition(CallStatus.RUNNING)
    call.add_progress(ProgressKind.LOG, "working")
    await store.save_call(call)
    call.result = {"ok": True}
    call.transition(CallStatus.COMPLETED)
    await store.save_call(call)

    await store.save_call(stale)  # older, still running
    await store.save_call(make_call("toolu_1"))  # pending
    loser = make_call("toolu_1", status=CallStatus.CANCELLED, error="too late", cancelled_by="U2")
    await store.save_call(loser)  # a different final status
    stored = await store.load_call("toolu_1")
    assert stored is not None
    assert stored.status is CallStatus.COMPLETED
    assert stored.result == {"ok": True}
    assert stored.error is None and stored.cancelled_by is None
    assert [entry.payload for entry in stored.progress] == ["working"]

    # Same final status: delivery and progress may still change, the outcome may not.
    copy = ToolCall.from_record(call.to_record())
    copy.add_progress(ProgressKind.LOG, "done")
    copy.delivered = True
    copy.result = {"ok": False}
    await store.save_call(copy)
    stored = await store.load_call("toolu_1")
    assert stored is not None
    assert stored.delivered and stored.result == {"ok": True}
    assert [entry.payload for entry in stored.progress] == ["working", "done"]

    await store.save_call(call)  # delivered=False in this copy: delivery is never undone
    stored = await store.load_call("toolu_1")
    assert stored is not None and stored.delivered


async def test_orphan_open_calls(store: Store) -> None:
    await store.ensure_session(KEY)
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    await store.save_call(make_call("running", status=CallStatus.RUNNING, created_at=t0 + timedelta(seconds=2)))
    await store.save_call(make_call("pending", created_at=t0 + timedelta(seconds=1)))
    done = make_call("done", created_at=t0, status=CallStatus.COMPLETED, result="ok", completed_at=t0)
    await store.save_call(done)

    orphans = await store.orphan_open_calls()
    assert [c.id for c in orphans] == ["pending", "running"]
    for orphan in orphans:
        assert orphan.status is CallStatus.ORPHANED
        assert orphan.error == "the process that ran this call stopped"
        assert orphan.completed_at is not None
        assert orphan.to_record() == (await store.load_call(orphan.id)).to_record()  # type: ignore[union-attr]
    assert (await store.load_call("done")).status is CallStatus.COMPLETED  # type: ignore[union-attr]
    assert await store.session_calls(KEY, only_open=True) == []
    assert await store.orphan_open_calls() == []

    # A late save from the dead process's copy cannot revive an orphan.
    await store.save_call(make_call("running", status=CallStatus.COMPLETED, result="late"))
    assert (await store.load_call("running")).status is CallStatus.ORPHANED  # type: ignore[union-attr]


async def test_session_calls_order_and_filters(store: Store) -> None:
    await store.ensure_session(KEY)
    await store.ensure_session("console:default")
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    await store.save_call(make_call("c", created_at=t0 + timedelta(seconds=3), status=CallStatus.FAILED, error="x"))
    await store.save_call(make_call("a", created_at=t0 + timedelta(microseconds=1)))
    await store.save_call(make_call("b", created_at=t0 + timedelta(seconds=2), status=CallStatus.RUNNING))
    await store.save_call(make_call("other", key="console:default"))
    assert [c.id for c in await store.session_calls(KEY)] == ["a", "b", "c"]
    assert [c.id for c in await store.session_calls(KEY, only_open=True)] == ["a", "b"]
    assert await store.load_call("missing") is None


async def test_delivery_tracking(store: Store) -> None:
    await store.ensure_session(KEY)
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    for n, status in enumerate([CallStatus.COMPLETED, CallStatus.FAILED, CallStatus.RUNNING, CallStatus.CANCELLED]):
        await store.save_call(make_call(f"c{n}", status=status, created_at=t0 + timedelta(seconds=n)))
    assert [c.id for c in await store.undelivered_calls(KEY)] == ["c0", "c1", "c3"]
    await store.mark_delivered(["c0", "c2", "unknown"])
    await store.mark_delivered([])
    assert [c.id for c in await store.undelivered_calls(KEY)] == ["c1", "c3"]
    assert not (await store.load_call("c2")).delivered  # type: ignore[union-attr]  # only final calls deliver


async def test_results_are_delivered_by_the_append_that_stores_them_or_not_at_all(store: Store) -> None:
    await store.ensure_session(KEY)
    await store.save_call(make_call("c0", status=CallStatus.COMPLETED))
    await store.save_call(make_call("c1", status=CallStatus.COMPLETED))
    results = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c0", "content": "ok"}]}]
    with pytest.raises(KeyError):  # an append that fails delivers nothing
        await store.append_messages("nope", results, delivered=["c0"])
    assert [c.id for c in await store.undelivered_calls(KEY)] == ["c0", "c1"]
    await store.append_messages(KEY, results, delivered=["c0"])
    assert [c.id for c in await store.undelivered_calls(KEY)] == ["c1"]
    assert await store.load_messages(KEY) == results


async def test_cancelled_writes_leave_no_open_transaction(store: Store) -> None:
    await store.ensure_session(KEY)
    for n in range(30):
        pair = [{"role": "user", "content": f"{n}a"}, {"role": "assistant", "content": f"{n}b"}]
        task = asyncio.create_task(store.append_messages(KEY, pair))
        await asyncio.sleep(n * 0.00005)  # cancel at a different point each time
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await store.append_messages(KEY, [{"role": "user", "content": "after"}])
    loaded = [m["content"] for m in await store.load_messages(KEY)]
    assert loaded[-1] == "after"
    body = loaded[:-1]
    assert len(body) % 2 == 0
    assert all(body[i][:-1] == body[i + 1][:-1] for i in range(0, len(body), 2))  # whole pairs or nothing


async def test_every_sqlite_method_is_one_hop_to_the_store_thread(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A method's statements run as one function on aiosqlite's thread, reads and writes alike: nothing else
    can run between them, which is why the store needs no lock of its own."""
    store = await SqliteStore.open(db_path)
    hops: list[object] = []
    execute = store._conn._execute

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(fn)
        return await execute(fn, *args, **kwargs)

    monkeypatch.setattr(store._conn, "_execute", counted)

    async def hops_of(work: Any) -> int:
        hops.clear()
        await work
        return len(hops)

    try:
        assert await hops_of(store.ensure_session(KEY)) == 1
        assert await hops_of(store.add_alias("alias", KEY)) == 1  # four statements
        assert await hops_of(store.resolve("alias")) == 1  # two reads
        pair = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        assert await hops_of(store.replace_messages(KEY, pair)) == 1
        with pytest.raises(KeyError):
            await store.replace_messages("slack:none", pair)
        assert await hops_of(store.update_address(KEY, {"speaker": "U1"})) == 1
        assert await hops_of(store.count_resume(KEY)) == 1
        assert await hops_of(store.load_messages(KEY)) == 1
        assert await hops_of(store.forget_session(KEY)) == 2  # the delete, then the WAL checkpoint
    finally:
        await store.close()
