"""The rest of the store's contract, once per back end (SQLite, PostgreSQL): the outbox, where calls are shown,
process groups, history rewrites and their archive, and the inbox from claim to answer.

The engine and edge tests exercise these on SQLite through the daemon; here each is pinned on both back ends,
since each has SQL of its own (upserts, RETURNING, NULL parameters, JSON merging)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from store_backends import message_archive

from bot.clock import utcnow
from bot.store import OwedEdit, ProcessGroupRecord, Store
from bot.toolcall import CallStatus, ToolCall
from bot.types import OwedPost

KEY = "slack:T1:C1:1.0"


def call(call_id: str, **fields: object) -> ToolCall:
    return ToolCall(id=call_id, session_key=KEY, turn_id="t1", tool_name="shell", input={}, **fields)  # type: ignore[arg-type]


async def test_the_save_that_answers_a_message_owes_its_answer_in_the_same_transaction(any_store: Store) -> None:
    store = any_store
    await store.ensure_session(KEY, {"edge": "slack"})
    asked = await store.claim_message(["msg:1"], KEY, "hi", address={})
    assert asked is not None
    answer = [OwedPost(KEY, "C1", "1.0", "part 1", [{"type": "section"}]), OwedPost(KEY, "C1", "1.0", "part 2")]
    with pytest.raises(KeyError):
        await store.append_messages("slack:T1:C9:9.0", [], answered=True, owed=answer)  # no such session
    assert await store.owed_messages() == []
    pair = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "part 1 part 2"}]
    ids = await store.append_messages(KEY, pair, inbox_ids=[asked.id], turn_id="t1", answered=True, owed=answer)
    assert await store.open_inbox() == {}
    owed = await store.owed_messages()
    assert [(m.id, m.thread_ts, m.text, m.blocks) for m in owed] == [
        (ids[0], "1.0", "part 1", [{"type": "section"}]),
        (ids[1], "1.0", "part 2", None),
    ]
    assert await store.append_messages(KEY, [], owed=[]) == []


async def test_owed_posts_and_edits_until_slack_confirms_them(any_store: Store) -> None:
    store = any_store
    first = await store.owe_post(KEY, "C1", "1.0", "answer", blocks=[{"type": "section"}])
    second = await store.owe_post(KEY, "C1", None, "notice")
    assert second > first > 0
    await store.owe_edits([OwedEdit(KEY, "C1", "2.0", "old", None), OwedEdit(KEY, "C1", "3.0", "x", None)])
    await store.owe_edits([OwedEdit(KEY, "C1", "2.0", "newest", [{"type": "divider"}])])  # one owed state per message
    owed = await store.owed_messages()
    assert [(m.id, m.ts, m.text, m.is_post) for m in owed[:2]] == [
        (first, None, "answer", True),
        (second, None, "notice", True),
    ]
    assert owed[0].blocks == [{"type": "section"}] and owed[1].blocks is None
    assert {(m.ts, m.text) for m in owed[2:]} == {("2.0", "newest"), ("3.0", "x")}

    await store.settle_post(first)
    await store.settle_edits([("C1", "2.0", "old"), ("C1", "3.0", None)])  # an older text landed: newest stays owed
    assert [(m.ts, m.text) for m in await store.owed_messages()] == [(None, "notice"), ("2.0", "newest")]
    await store.settle_edits([("C1", "2.0", "newest")])
    assert [m.id for m in await store.owed_messages()] == [second]


async def test_where_calls_are_shown_and_their_process_groups(any_store: Store) -> None:
    store = any_store
    await store.ensure_session(KEY)
    t0 = utcnow()
    await store.save_calls([call(f"c{n}", created_at=t0 + timedelta(seconds=n)) for n in range(3)])
    await store.set_call_display(["c0", "c1"], "msg:1")
    await store.set_call_display(["c2"], "msg:2")
    await store.set_call_display(["c1"], "msg:2")  # moved: shown in one place at a time
    shown = await store.displays_of(["c0", "c2"])
    assert {place: [c.id for c in calls] for place, calls in shown.items()} == {"msg:1": ["c0"], "msg:2": ["c1", "c2"]}
    assert await store.displays_of([]) == {}

    await store.record_process_group(ProcessGroupRecord("c0", 100, "leader-a", "owner-a"))
    await store.record_process_group(ProcessGroupRecord("c0", 200, None, "owner-b"))  # the newest group wins
    await store.record_process_group(ProcessGroupRecord("c1", 300, "leader-c", None))
    assert await store.process_groups() == [
        ProcessGroupRecord("c0", 200, None, "owner-b"),
        ProcessGroupRecord("c1", 300, "leader-c", None),
    ]
    await store.forget_process_groups(["c0", "unknown"])
    await store.forget_process_groups([])
    assert [g.call_id for g in await store.process_groups()] == ["c1"]


async def test_a_rewritten_history_archives_what_it_dropped_once(any_store: Store) -> None:
    store = any_store
    await store.ensure_session(KEY)
    old = [{"role": "user", "content": f"m{n}"} for n in range(4)]
    await store.append_messages(KEY, old)
    summary = {"role": "user", "content": "summary of m0-m2"}
    await store.replace_messages(KEY, [summary, old[3]])
    assert await store.load_messages(KEY) == [summary, old[3]]
    await store.append_messages(KEY, [{"role": "assistant", "content": "after"}])
    # In the order written: m3 kept its row (and its time), so it is not archived a second time.
    assert await message_archive(store, KEY) == [*old, summary, {"role": "assistant", "content": "after"}]


async def test_the_inbox_from_claim_to_answer(any_store: Store) -> None:
    store = any_store
    first = await store.claim_message(["msg:1"], KEY, "hi", address={"channel": "C1", "speaker": "U1"})
    second = await store.claim_message(["msg:2"], KEY, "more", address={"speaker": "U2"}, blocks=[{"type": "text"}])
    assert first is not None and second is not None and first.pending
    session = await store.get_session(KEY)
    assert session is not None and session.address == {"channel": "C1", "speaker": "U2"}  # merged, new keys win

    unread = await store.claim_message(["msg:3"], KEY, "file", address={}, reading_until=utcnow() + timedelta(hours=1))
    assert unread is not None
    later = await store.claim_message(["msg:4"], KEY, "after the file", address={})
    assert later is not None
    # Its files are still being read, and what came after it waits for it: the model gets them in order.
    assert [i.text for i in await store.session_inbox(KEY)] == ["hi", "more"]
    await store.count_resume(KEY)
    opened = (await store.open_inbox())[KEY]
    assert [(i.text, i.resumes, i.blocks) for i in opened] == [("hi", 1, None), ("more", 1, [{"type": "text"}])]

    read = [{"type": "text", "text": "more"}, {"type": "text", "text": "[file a.md]\n# A"}]
    assert await store.revise_message(second.id, "more", read)  # its files, read after the claim
    await store.append_messages(KEY, [{"role": "user", "content": "hi"}], inbox_ids=[first.id], turn_id="t1")
    assert not await store.revise_message(first.id, "changed", None)  # stored: the history holds its text
    assert [(i.turn_id, i.text, i.blocks) for i in (await store.open_inbox())[KEY]] == [
        ("t1", "hi", None),
        (None, "more", read),
    ]
    await store.append_messages(KEY, [], answered=True)  # the stored row is answered, the pending one stays owed
    assert [i.id for i in (await store.open_inbox())[KEY]] == [second.id]
    assert await store.answer_inbox(KEY) == 0
    assert await store.revise_message(unread.id, "file", [{"type": "text", "text": "[file b.md]"}])
    assert [(i.text, i.blocks, i.resumes) for i in await store.session_inbox(KEY)][1:] == [
        ("file", [{"type": "text", "text": "[file b.md]"}], 0),  # no resume counted while it was unseen
        ("after the file", None, 0),
    ]
    assert await store.give_up_inbox(KEY) == 3
    assert await store.open_inbox() == {}
    assert await store.prune_inbox(utcnow() - timedelta(hours=1)) == 0
    assert await store.prune_inbox(utcnow() + timedelta(seconds=1)) == 4


async def test_final_calls_keep_their_outcome_and_still_take_delivery(any_store: Store) -> None:
    store = any_store
    await store.ensure_session(KEY)
    done = call("c1", status=CallStatus.COMPLETED, result={"ok": True}, completed_at=utcnow())
    await store.save_call(done)
    await store.save_call(call("c1", status=CallStatus.FAILED, error="late"))  # another final status: ignored
    done.delivered = True
    await store.save_call(done)
    loaded = await store.load_call("c1")
    assert loaded is not None and loaded.status is CallStatus.COMPLETED and loaded.result == {"ok": True}
    assert loaded.delivered
