"""The outbox against the fake Slack: what Slack does not take now is kept in the store and delivered later,
once, in order; final edits survive a stop; an answer carries the outcomes its status message does not show yet."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fakes.slack_api import FakeSlack, StoredMessage

from bot.slack import outbox as outbox_module
from bot.slack.client import SlackClient
from bot.slack.edits import EditScheduler
from bot.slack.journal import FinalJournal
from bot.slack.outbox import marker
from bot.slack.output import SlackEdge
from bot.slack.posts import PostQueue
from bot.store import OwedEdit, SqliteStore, Store
from bot.telemetry.metrics import Metrics
from bot.toolcall import CallStatus, ToolCall
from bot.types import TurnOutcome

KEY = "slack:T1:C1:100.000000"
WAIT_S = 20.0  # an upper bound: generous, so a loaded machine is slow, not failing


@dataclass
class Rig:
    slack: FakeSlack
    client: SlackClient
    store: Store
    root: str
    edge: SlackEdge | None = None
    edits: EditScheduler | None = None
    metrics: Metrics = field(default_factory=Metrics)

    async def start(self, **edit_options: float) -> SlackEdge:
        """One "process": an edit scheduler with a journal, an edge on the store, and what it owes resumed."""
        options = {"per_minute": 6000, "burst": 100, "min_interval_s": 0.01} | edit_options
        self.edits = EditScheduler(self.client, journal=FinalJournal(self.store), **options)  # type: ignore[arg-type]
        await self.edits.start()
        posts = PostQueue(self.client, per_second=100, burst=100, give_up_after_s=0.3, call_timeout_s=0.3)
        self.edge = SlackEdge(
            self.client,
            self.edits,
            store=self.store,
            team_id="T1",
            first_post_wait_s=0.0,
            posts=posts,
            metrics=self.metrics,
        )
        await self.edge.resume()
        return self.edge

    async def stop(self) -> None:
        """A graceful stop: drain, flush for a moment, keep the rest owed."""
        assert self.edge is not None and self.edits is not None
        await self.edge.close(1.0)
        await self.edits.close(1.0)

    def posts(self) -> list[StoredMessage]:
        return self.slack.posts_in_thread("C1", self.root)


@pytest.fixture
async def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    monkeypatch.setattr(outbox_module, "RETRY_BASE_S", 0.2)
    async with FakeSlack() as slack:
        client = SlackClient(token="xoxb-test", base_url=slack.api_url)
        store = await SqliteStore.open(tmp_path / "bot.db")
        root = slack.user_message("C1", "<@UBOT> hi", user="U1")["ts"]
        address = {"edge": "slack", "team": "T1", "channel": "C1", "thread_ts": root, "requester": "U1"}
        await store.ensure_session(KEY, address)
        rig = Rig(slack, client, store, root)
        try:
            yield rig
        finally:
            if rig.edge is not None:
                await rig.stop()
            await store.close()


async def test_an_answer_slack_refuses_for_a_while_is_delivered_later_once_and_in_order(rig: Rig) -> None:
    edge = await rig.start()
    rig.slack.fail("chat.postMessage", status=500, times=None)
    edge.text_delta(KEY, "The answer is 42.")
    edge.text_done(KEY)
    edge.notice(KEY, "⚠️ and a notice after it")
    assert edge.threads.outbox is not None
    await rig.slack.wait_for(
        lambda: edge.threads.outbox is not None and edge.threads.outbox.owed == 2, WAIT_S, "both owed"
    )
    assert rig.posts() == []
    rig.slack.clear_failures()
    assert await edge.threads.outbox.idle(WAIT_S)
    assert [p.text for p in rig.posts()] == ["The answer is 42.", "⚠️ and a notice after it"]
    assert await rig.store.owed_messages() == []
    assert "threadbot_outbox_age_seconds_count 2.0" in rig.metrics.render(), "both were owed, then delivered"


async def test_what_waits_in_the_queue_when_the_turn_saves_is_owed_by_that_save_and_posted_once(rig: Rig) -> None:
    """The turn's last save owes what the session's queue still holds (`owed_posts`), in its order; the queue then
    leaves it to the outbox, which delivers each once, after what was queued before it."""
    edge = await rig.start()
    edge.notice(KEY, "first")
    await rig.slack.wait_for(lambda: [p.text for p in rig.posts()] == ["first"], WAIT_S, "the address known")
    rig.slack.fail("chat.postMessage", status=500, times=None)
    edge.notice(KEY, "second")
    edge.text_delta(KEY, "The answer is 42.")
    edge.text_done(KEY)

    owed = edge.owed_posts(TurnOutcome(KEY))
    assert [(p.channel, p.thread_ts, p.text) for p in owed] == [
        ("C1", rig.root, "second"),
        ("C1", rig.root, "The answer is 42."),
    ]
    assert edge.owed_posts(TurnOutcome(KEY)) == [], "handed over once"
    ids = await rig.store.append_messages(KEY, [], owed=owed)
    owed_now = [m.id for m in await rig.store.owed_messages()]  # "first" may still be settling: it landed
    assert owed_now[-len(ids) :] == ids, "owed before anything is tried"
    edge.turn_finished(TurnOutcome(KEY, owed_posts=ids))
    assert edge.threads.outbox is not None
    await rig.slack.wait_for(
        lambda: edge.threads.outbox is not None and edge.threads.outbox.owed == 2, WAIT_S, "handed over"
    )
    rig.slack.clear_failures()
    assert await edge.threads.outbox.idle(WAIT_S)
    assert [p.text for p in rig.posts()] == ["first", "second", "The answer is 42."]
    assert [p.extra.get("metadata") for p in rig.posts()[1:]] == [marker(post_id) for post_id in ids]
    assert await rig.store.owed_messages() == []


async def test_an_answer_owed_by_the_turns_save_is_posted_by_its_queue_when_slack_takes_it(rig: Rig) -> None:
    edge = await rig.start()
    edge.notice(KEY, "first")
    await rig.slack.wait_for(lambda: [p.text for p in rig.posts()] == ["first"], WAIT_S, "the address known")
    edge.text_delta(KEY, "The answer is 42.")
    edge.text_done(KEY)
    ids = await rig.store.append_messages(KEY, [], owed=edge.owed_posts(TurnOutcome(KEY)))
    edge.turn_finished(TurnOutcome(KEY, owed_posts=ids))
    await rig.slack.wait_for(lambda: len(rig.posts()) == 2 and not edge.busy_sessions, WAIT_S, "the answer")
    assert edge.threads.outbox is not None and await edge.threads.outbox.idle(WAIT_S)
    assert [(p.text, p.extra.get("metadata")) for p in rig.posts()[1:]] == [("The answer is 42.", marker(ids[0]))]
    assert edge.threads.outbox.delivered == 0, "posted by the session's queue, not retried"
    assert await rig.store.owed_messages() == []


async def test_what_a_stopped_process_owed_is_delivered_by_the_next_and_never_twice(rig: Rig) -> None:
    status = str((await rig.client.chat_postMessage(channel="C1", thread_ts=rig.root, text="⏳ running"))["ts"])
    landed = await rig.store.owe_post(KEY, "C1", rig.root, "posted just before the crash")
    await rig.client.chat_postMessage(
        channel="C1", thread_ts=rig.root, text="posted just before the crash", metadata=marker(landed)
    )
    await rig.store.owe_post(KEY, "C1", rig.root, "never posted")
    await rig.store.owe_edits([OwedEdit("", "C1", status, "✅ done", None)])

    await rig.start()
    assert rig.edge is not None and rig.edge.threads.outbox is not None and rig.edits is not None
    assert await rig.edge.threads.outbox.idle(WAIT_S)
    await rig.edits.idle(WAIT_S)
    texts = [p.text for p in rig.posts()]
    assert texts == ["✅ done", "posted just before the crash", "never posted"]
    assert rig.edge.threads.outbox.duplicates_avoided == 1 and await rig.store.owed_messages() == []


async def test_final_edits_left_at_a_stop_are_kept_and_land_after_the_restart(rig: Rig) -> None:
    """1,000 threads' final states owed while Slack fails every edit: all kept across the stop, all painted after."""
    count = 1_000
    messages = [
        str((await rig.client.chat_postMessage(channel=f"C{i % 50}", text=f"m{i}"))["ts"]) for i in range(count)
    ]
    where = [(f"C{i % 50}", ts) for i, ts in enumerate(messages)]
    await rig.start(per_minute=600_000, burst=1_000)
    assert rig.edits is not None
    rig.slack.fail("chat.update", status=500, times=None)
    for i, (channel, ts) in enumerate(where):
        rig.edits.update(channel, ts, text=f"final {i}", final=True)
    await rig.stop()
    assert len(await rig.store.owed_messages()) == count, "every final is in the store"
    rig.slack.clear_failures()
    await rig.start(per_minute=600_000, burst=1_000)
    await rig.edits.idle(30)
    assert [rig.slack.message(channel, ts).text for channel, ts in where] == [f"final {i}" for i in range(count)]
    await rig.edits.close(WAIT_S)
    assert await rig.store.owed_messages() == []


async def test_a_status_post_that_failed_is_posted_in_its_final_state(rig: Rig) -> None:
    edge = await rig.start()
    call = ToolCall("toolu_s", KEY, "t", "sleep_for", {"seconds": 1})
    rig.slack.fail("chat.postMessage", status=500, times=None)
    edge.calls_started(KEY, [call])
    await rig.slack.wait_for(lambda: rig.slack.calls_to("chat.postMessage"), WAIT_S)
    rig.slack.clear_failures()
    call.transition(CallStatus.RUNNING)
    call.transition(CallStatus.COMPLETED)
    edge.call_changed(call)
    await rig.slack.wait_for(lambda: rig.posts(), WAIT_S, "the status, posted final")
    assert edge.threads.outbox is not None and await edge.threads.outbox.idle(WAIT_S)
    [status] = rig.posts()
    assert "✅" in status.text and "running" not in status.text


async def test_an_answer_next_to_a_queued_final_carries_the_outcome(rig: Rig) -> None:
    edge = await rig.start()
    call = ToolCall("toolu_o", KEY, "t", "sleep_for", {"seconds": 1})
    edge.calls_started(KEY, [call])
    [status] = await rig.slack.wait_for(lambda: rig.posts(), WAIT_S)
    release = rig.slack.hold("chat.update")  # the edit budget is spent: the final waits in line
    call.transition(CallStatus.RUNNING)
    call.transition(CallStatus.COMPLETED)
    edge.call_changed(call)
    edge.text_delta(KEY, "Slept well.")
    edge.text_done(KEY)
    edge.turn_finished(TurnOutcome(KEY, text="Slept well."))
    answer = await rig.slack.wait_for(lambda: next((p for p in rig.posts() if p.text == "Slept well."), None), WAIT_S)
    assert "✅" not in status.text, "the status message still shows the call running"
    assert answer.blocks is not None and answer.blocks[-1]["type"] == "context"
    assert "✅" in answer.blocks[-1]["elements"][0]["text"], "the answer says how the call ended"
    release.set()
    assert rig.edits is not None
    await rig.edits.idle(WAIT_S)
    assert "✅" in status.text
