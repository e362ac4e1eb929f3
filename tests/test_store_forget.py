"""Forgetting a session, once per back end, and retention's sweep with a controlled clock.

On SQLite the forgotten text must leave the database's bytes too, the -wal included: `secure_delete`
overwrites freed pages and the checkpoint empties the log."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from store_backends import message_archive

from bot.agent.fence import said
from bot.clock import utcnow
from bot.schedule.retention import Retention
from bot.store import NewReminder, ReminderKind, SqliteStore, Store
from bot.store.db import fetching
from bot.store.forgetting import Forgetting
from bot.toolcall import ToolCall
from bot.types import Speaker, Usage
from tools.sandbox import session_dir

SECRET = "the launch code is ZEBRA-7741"


async def fill(store: Store, key: str) -> None:
    """A session with its text in every place the store keeps text."""
    await store.claim_message([f"event:{key}"], key, SECRET, address={"channel": "C1"}, requester="U1")
    await store.append_messages(key, [{"role": "user", "content": SECRET}])
    await store.replace_messages(key, [{"role": "user", "content": "summary"}])  # the original goes to the archive
    call = ToolCall(id=f"toolu_{key[-1]}", session_key=key, turn_id="t1", tool_name="wordcount", input={"text": SECRET})
    await store.save_call(call)
    await store.owe_post(key, "C1", "1.0", SECRET)
    await store.record_usage(session_key=key, turn_id="t1", model="m", usage=Usage(input_tokens=7), requester="U1")


async def test_forget_deletes_every_row_holding_the_text_and_keeps_usage(any_store: Store) -> None:
    store = any_store
    await fill(store, "slack:T1:C1:1.0")
    await fill(store, "slack:T1:C1:2.0")
    await store.add_reminder(
        NewReminder("slack:T1:C1:1.0", ReminderKind.REMINDER, SECRET, utcnow() + timedelta(days=1))
    )
    assert await store.forget_session("slack:T1:C1:1.0") is True
    assert await store.get_session("slack:T1:C1:1.0") is None
    assert await message_archive(store, "slack:T1:C1:1.0") == []
    assert await store.pending_reminders("slack:T1:C1:1.0") == []
    assert [m.session_key for m in await store.owed_messages()] == ["slack:T1:C1:2.0"]
    assert await message_archive(store, "slack:T1:C1:2.0"), "the other session is untouched"
    usage = await store._query(fetching("SELECT session_key, input_tokens FROM model_usage ORDER BY session_key"))
    calls = await store._query(fetching("SELECT session_key FROM tool_calls"))
    inbox = await store._query(fetching("SELECT session_key FROM inbox"))
    assert [tuple(row) for row in usage] == [("slack:T1:C1:1.0", 7), ("slack:T1:C1:2.0", 7)], "token totals stay"
    assert [row[0] for row in calls] == [row[0] for row in inbox] == ["slack:T1:C1:2.0"]
    assert await store.forget_session("slack:T1:C1:1.0") is False


async def test_retention_forgets_only_sessions_idle_past_the_limit(any_store: Store, tmp_path: Path) -> None:
    store = any_store
    await fill(store, "slack:T1:C1:1.0")
    await fill(store, "slack:T1:C1:2.0")
    await store.add_reminder(NewReminder("slack:T1:C1:2.0", ReminderKind.WAKE, "check", utcnow() + timedelta(days=400)))
    await fill(store, "console:1")
    now: list[datetime] = [utcnow()]
    work_root = tmp_path / "work"
    for key in ("slack:T1:C1:1.0", "slack:T1:C1:2.0"):
        session_dir(work_root, key).mkdir(parents=True)
        (session_dir(work_root, key) / "notes.txt").write_text(SECRET)
    owns = lambda key: key.startswith("slack:")  # noqa: E731
    retention = Retention(Forgetting(store, work_root), timedelta(days=90), lambda: now[0], owns=owns)
    assert await retention.sweep() == [], "nothing is 90 days old yet"
    now[0] += timedelta(days=91)
    assert await retention.sweep() == ["slack:T1:C1:1.0"], "a pending wait keeps its session; console is not ours"
    assert not session_dir(work_root, "slack:T1:C1:1.0").exists(), "its commands' files go with it"
    assert (session_dir(work_root, "slack:T1:C1:2.0") / "notes.txt").exists()
    assert await store.get_session("slack:T1:C1:1.0") is None
    assert await store.get_session("slack:T1:C1:2.0") is not None and await store.get_session("console:1")


async def test_forgetting_a_session_takes_its_rows_and_its_files_in_one_step(any_store: Store, tmp_path: Path) -> None:
    store, key = any_store, "slack:T1:C1:1.0"
    await fill(store, key)
    files = session_dir(tmp_path / "work", key)
    files.mkdir(parents=True)
    (files / "notes.txt").write_text(SECRET)
    forgetting = Forgetting(store, tmp_path / "work")
    assert await forgetting.forget(key) is True
    assert await store.get_session(key) is None and not files.exists()
    files.mkdir(parents=True)  # files left by a forget cut short between its two steps
    assert await forgetting.forget(key) is False and not files.exists(), "no rows left, the files still go"


def db_bytes(db_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db_path.parent.iterdir() if p.name.startswith(db_path.name))


async def test_a_forgotten_text_leaves_the_sqlite_files_bytes(tmp_path: Path) -> None:
    db_path = tmp_path / "bot.db"
    store = await SqliteStore.open(db_path)
    try:
        await fill(store, "slack:T1:C1:1.0")
        await fill(store, "slack:T1:C1:2.0")
        assert SECRET.encode() in db_bytes(db_path)
        await store.forget_session("slack:T1:C1:1.0")
        await store.forget_session("slack:T1:C1:2.0")
        assert SECRET.encode() not in db_bytes(db_path), "secure_delete and the checkpoint leave no copy"
    finally:
        await store.close()


TAGGED = 'my <b>PIN</b> & "code" is\nKESTREL-9031'
"""What a person types with the characters `said` escapes: stored, it reads nothing like this."""


async def said_everywhere(store: Store, key: str, message_ts: str, text: str) -> None:
    """A person's message stored as the router stores it: inbox row, history, compacted into the archive."""
    line = said(Speaker("U1", "Ada"), text, ts=message_ts)
    other = said(Speaker("U2", "Bo"), "unrelated", ts="9.9")
    await store.claim_message([f"event:{message_ts}"], key, line, address={}, blocks=[{"type": "text", "text": line}])
    await store.append_messages(key, [{"role": "user", "content": [{"type": "text", "text": f"{other}\n{line}"}]}])
    await store.replace_messages(key, [{"role": "user", "content": line}, {"role": "assistant", "content": "ok"}])


async def test_redact_message_replaces_a_deleted_message_everywhere_it_was_stored(any_store: Store) -> None:
    store = any_store
    key = "slack:T1:C1:1.0"
    await said_everywhere(store, key, "1.5", TAGGED)
    assert await store.redact_message(key, "1.5") == 3  # the message, its archived original, the inbox row
    archive = str(await message_archive(store, key))
    assert "KESTREL" not in archive and "unrelated" in archive, "only that message goes"
    content = (await store.load_messages(key))[0]["content"]
    assert content == '<message from="U1" name="Ada" ts="1.5">[a message deleted in Slack]</message>'
    inbox = await store._query(fetching("SELECT text, blocks FROM inbox"))
    assert "KESTREL" not in str([tuple(row) for row in inbox])
    assert await store.redact_message(key, "") == 0 and await store.redact_message("slack:none", "1.5") == 0
    assert await store.redact_message(key, "7.7") == 0, "a message never stored changes nothing"


async def test_a_deleted_message_with_markup_leaves_the_sqlite_files_bytes(tmp_path: Path) -> None:
    db_path = tmp_path / "bot.db"
    store = await SqliteStore.open(db_path)
    try:
        await said_everywhere(store, "slack:T1:C1:1.0", "1.5", TAGGED)
        assert b"KESTREL-9031" in db_bytes(db_path)
        await store.redact_message("slack:T1:C1:1.0", "1.5")
        assert b"KESTREL-9031" not in db_bytes(db_path), "its words, escaped or not, leave no copy"
        assert b"&lt;b&gt;PIN" not in db_bytes(db_path) and b"<b>PIN" not in db_bytes(db_path)
    finally:
        await store.close()
