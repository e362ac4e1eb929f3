"""Acknowledged messages survive a stop: the inbox, the turn's saves, and `Engine.resume` at the next start.

A crash is modelled by the state it leaves in the store (the inbox row, the stored pairs, the calls);
the crash suite (tests/test_crash.py) kills real daemons. A graceful shutdown is run for real here.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from conftest import CoreFactory, RecordingOutput
from fakes.anthropic_api import FakeAnthropic, Reply, text, tool_results, tool_use, user_texts

from bot.agent.engine import GIVE_UP_NOTICE, MAX_RESUMES, RESTART_NOTICE
from bot.clock import utcnow
from bot.store import SqliteStore, Store
from bot.toolcall import CallStatus, ToolCall

KEY = "slack:T1:C1:1.0"


def owned(key: str) -> bool:
    return key.startswith("slack:")


async def claim(store: Store, text: str, ts: str = "1.0") -> int:
    item = await store.claim_message([f"msg:C1:{ts}"], KEY, text, address={"edge": "slack"})
    assert item is not None
    return item.id


async def test_claim_is_once_and_creates_the_session(core_factory: CoreFactory) -> None:
    core = await core_factory()
    store = core.store
    first = await store.claim_message(["event:E1", "msg:C1:1.0"], KEY, "hi", address={"speaker": "U1"})
    assert first is not None and first.pending
    # the app_mention twin, a redelivery: either key seen means the whole claim is void, and nothing is written
    assert await store.claim_message(["event:E2", "msg:C1:1.0"], KEY, "hi", address={}) is None
    assert await store.claim_event("event:E2"), "a void claim records none of its keys"
    again = await store.claim_message(["msg:C1:2.0"], KEY, "more", address={"speaker": "U2"})
    assert again is not None
    session = await store.get_session(KEY)
    assert session is not None and session.address == {"speaker": "U2"}
    assert [i.text for i in (await store.open_inbox())[KEY]] == ["hi", "more"]


async def test_an_answered_turn_settles_its_inbox(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory()
    inbox_id = await claim(core.store, "what is up?")
    fake.script(Reply.text_only("Not much."))
    core.engine.submit(KEY, "what is up?", inbox_id=inbox_id)
    await output.wait_turns(KEY, 1)
    assert await core.store.open_inbox() == {}


async def test_a_question_cut_off_mid_stream_is_asked_again(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    """Before the inbox, the question lived only in memory until its (user, assistant) pair was saved."""
    first = await core_factory()
    settings = first.settings
    await claim(first.store, "how tall is the tower?")
    await core_factory.close(first)  # the state a kill mid-stream leaves: claimed, nothing in the history

    second = await core_factory(settings=settings)
    fake.script(Reply.text_only("330 m."))
    assert await second.engine.resume(owned) == [KEY]
    await output.wait_turns(KEY, 1)
    assert output.notices[0] == (KEY, RESTART_NOTICE)
    assert user_texts(fake.requests[-1]) == ["how tall is the tower?"]
    assert await second.store.open_inbox() == {}
    assert await second.engine.resume(owned) == [], "answered once: a second start has nothing to resume"


async def test_a_turn_cut_off_mid_tool_goes_on_with_the_call_orphaned(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    first = await core_factory()
    settings = first.settings
    store = first.store
    inbox_id = await claim(store, "sleep, then say done")
    use = tool_use("sleep_for", {"seconds": 30})
    await store.save_call(ToolCall(use["id"], KEY, f"{KEY}#1", "sleep_for", {"seconds": 30}, status=CallStatus.RUNNING))
    pair = [{"role": "user", "content": [text("sleep, then say done")]}, {"role": "assistant", "content": [use]}]
    await store.append_messages(KEY, pair, inbox_ids=[inbox_id], turn_id=f"{KEY}#1")
    await core_factory.close(first)

    second = await core_factory(settings=settings)
    fake.script(Reply.text_only("The sleep was cut off."))
    assert await second.engine.resume(owned) == [KEY]
    await output.wait_turns(KEY, 1)
    request = fake.requests[-1]
    assert "orphaned" in tool_results(request)[use["id"]]
    assert user_texts(request) == ["sleep, then say done"], "a stored question is not asked twice"
    assert await second.store.open_inbox() == {}
    assert not fake.rejections


async def test_a_stored_answer_is_not_given_twice(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    """Killed after the answer was saved but before the turn ended: the rows are settled, no model call."""
    first = await core_factory()
    settings = first.settings
    inbox_id = await claim(first.store, "say hi")
    pair = [{"role": "user", "content": [text("say hi")]}, {"role": "assistant", "content": [text("hi")]}]
    await first.store.append_messages(KEY, pair, inbox_ids=[inbox_id], turn_id=f"{KEY}#1")
    await core_factory.close(first)

    second = await core_factory(settings=settings)
    assert await second.engine.resume(owned) == []
    assert fake.requests == [] and output.notices == []
    assert await second.store.open_inbox() == {}


async def test_other_edges_sessions_are_left_alone(core_factory: CoreFactory, fake: FakeAnthropic) -> None:
    core = await core_factory()
    await claim(core.store, "for slack")
    assert await core.engine.resume(lambda key: key.startswith("console:")) == []
    assert fake.requests == []


async def test_a_shutdown_mid_answer_leaves_the_question_owed(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    """A turn cancelled by a shutdown is no answer: the question stays out of the history and owed."""
    first = await core_factory()
    settings = first.settings
    inbox_id = await claim(first.store, "write a poem")
    hold = asyncio.Event()
    fake.script(Reply.text_only("Roses are red", hold=hold))
    first.engine.submit(KEY, "write a poem", inbox_id=inbox_id)
    await fake.wait_for_requests(1)
    injected = await first.store.claim_message(["msg:C1:2.0"], KEY, "make it short", address={})
    assert injected is not None
    first.engine.submit(KEY, "make it short", inbox_id=injected.id)
    await core_factory.close(first)  # SIGTERM: grace, then cancel "by shutdown"
    assert await first_history(settings.db_path) == []

    second = await core_factory(settings=settings)
    fake.script(Reply.text_only("Short poem."))
    assert await second.engine.resume(owned) == [KEY]
    await output.wait_for(lambda: len(output.finished(KEY)) == 2)
    assert user_texts(fake.requests[-1]) == ["write a poem", "make it short"]
    assert await second.store.open_inbox() == {}
    assert not fake.rejections


async def first_history(path: Path, key: str = KEY) -> list[dict[str, object]]:
    """The stored conversation, read after the core that wrote it closed."""
    store = await SqliteStore.open(path)
    try:
        return await store.load_messages(key)
    finally:
        await store.close()


async def test_a_message_that_keeps_killing_the_process_is_given_up(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    first = await core_factory()
    settings = first.settings
    await claim(first.store, "the question that crashes us")
    for _ in range(MAX_RESUMES):
        await first.store.count_resume(KEY)  # three starts resumed it, and each died in its turn
    await core_factory.close(first)

    second = await core_factory(settings=settings)
    assert await second.engine.resume(owned) == []
    assert output.notices == [(KEY, GIVE_UP_NOTICE)] and fake.requests == []
    assert await second.store.open_inbox() == {}


async def test_answered_rows_are_pruned_and_owed_ones_kept(core_factory: CoreFactory) -> None:
    core = await core_factory()
    store = core.store
    answered = await claim(store, "answered", ts="1.0")
    pair = [{"role": "user", "content": [text("answered")]}, {"role": "assistant", "content": [text("yes")]}]
    await store.append_messages(KEY, pair, inbox_ids=[answered], turn_id=f"{KEY}#1", answered=True)
    await claim(store, "still owed", ts="2.0")
    assert await store.prune_inbox(utcnow() + timedelta(seconds=1)) == 1
    assert [item.text for item in (await store.open_inbox())[KEY]] == ["still owed"]


async def test_a_background_result_counts_as_delivered_only_once_it_is_stored(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    first = await core_factory()
    settings = first.settings
    inbox_id = await claim(first.store, "anything new?")
    done = ToolCall("toolu_bg1", KEY, f"{KEY}#1", "wordcount", {"text": "a b"}, status=CallStatus.COMPLETED)
    done.result = {"words": 2}
    await first.store.save_call(done)
    fake.script(Reply.text_only("Looking", hold=asyncio.Event()))
    first.engine.submit(KEY, "anything new?", inbox_id=inbox_id)
    await fake.wait_for_requests(1)
    assert any("[background tool result]" in t for t in user_texts(fake.requests[0]))
    await core_factory.close(first)  # stopped before the note was stored: it is still owed

    second = await core_factory(settings=settings)
    assert [call.id for call in await second.store.undelivered_calls(KEY)] == ["toolu_bg1"]
    fake.script(Reply.text_only("Two words."))
    await second.engine.resume(owned)
    await output.wait_for(lambda: len(output.finished(KEY)) == 2)
    notes = [t for t in user_texts(fake.requests[-1]) if "[background tool result]" in t]
    assert len(notes) == 1 and await second.store.undelivered_calls(KEY) == []


async def test_without_an_inbox_a_shutdown_still_keeps_the_question_in_the_history(
    core_factory: CoreFactory, fake: FakeAnthropic
) -> None:
    """The console hands over no inbox rows: nothing would resume it, so the question must not be dropped."""
    first = await core_factory()
    settings = first.settings
    fake.script(Reply.text_only("Thinking", hold=asyncio.Event()))
    first.engine.submit("console:default", "a console question")
    await fake.wait_for_requests(1)
    await core_factory.close(first)
    assert await first_history(settings.db_path, "console:default") == [
        {"role": "user", "content": [text("a console question")]},
        {"role": "assistant", "content": [text("(turn cancelled by shutdown)")]},
    ]
