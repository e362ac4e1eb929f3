"""`SlackEdge` against the fake Slack: streaming, splitting, status messages, heartbeat threads, reminders."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakes.slack_agent import TIER_3_PER_MINUTE
from fakes.slack_api import FakeSlack, StoredMessage

from bot.clock import utcnow
from bot.errors import SlackRateLimited
from bot.slack import sessions as sessions_module
from bot.slack.agent_session import AgentSessions
from bot.slack.client import SlackClient
from bot.slack.edits import EditScheduler
from bot.slack.outbox import marker
from bot.slack.output import SlackEdge
from bot.slack.posts import PostQueue
from bot.slack.thinking import BURST as THINKING_BURST
from bot.slack.thinking import ThinkingStatus
from bot.store import NewReminder, ReminderKind, ReminderStatus, SqliteStore, Store
from bot.toolcall import CallStatus, ProgressKind, ToolCall
from bot.types import LineKind, OwedLine, TurnOutcome

KEY = "slack:T1:C1:100.000000"
WAIT_S = 10.0  # an upper bound: generous, so a loaded machine is slow, not failing


@dataclass
class Rig:
    slack: FakeSlack
    edge: SlackEdge
    edits: EditScheduler
    store: Store
    root: str

    def posts(self, thread_ts: str | None = None) -> list[StoredMessage]:
        return self.slack.posts_in_thread("C1", thread_ts or self.root)

    async def settle(self) -> None:
        """Every queued post done and every edit sent."""
        await self.edge.close(WAIT_S)
        await self.edits.idle(WAIT_S)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with FakeSlack() as slack:
        client = SlackClient(token="xoxb-test", base_url=slack.api_url)
        edits = EditScheduler(client, per_minute=6000, burst=100, min_interval_s=0.01)
        await edits.start()
        store = await SqliteStore.open(tmp_path / "bot.db")
        edge = SlackEdge(client, edits, store=store, team_id="T1", first_post_wait_s=0.0)
        root = slack.user_message("C1", "<@UBOT> hi", user="U1")["ts"]
        address = {"edge": "slack", "team": "T1", "channel": "C1", "thread_ts": root, "requester": "U1"}
        await store.ensure_session(KEY, address)
        try:
            yield Rig(slack, edge, edits, store, root)
        finally:
            await edge.close(WAIT_S)
            await edits.close(WAIT_S)
            await store.close()


async def test_an_answer_streams_into_one_message_and_ends_complete(rig: Rig) -> None:
    rig.edge.turn_started(KEY)
    rig.edge.model_call_started(KEY)
    for word in ["Hello", " wide", " world", "."]:
        rig.edge.text_delta(KEY, word)
        await rig.slack.wait_for(lambda: rig.posts(), WAIT_S)
    rig.edge.text_done(KEY)
    rig.edge.turn_finished(TurnOutcome(KEY, text="Hello wide world."))
    await rig.settle()
    [answer] = rig.posts()
    assert answer.text == "Hello wide world."
    assert answer.blocks == [{"type": "markdown", "text": "Hello wide world."}]
    assert answer.history[0].text == "Hello" and answer.edits, "posted on the first words, then edited"
    assert rig.slack.assistant_statuses[0] == ("C1", rig.root, "is thinking…")


async def test_a_quick_answer_is_posted_whole_without_edits(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        client = SlackClient(token="xoxb-test", base_url=slack.api_url)
        edits = EditScheduler(client)
        await edits.start()
        store = await SqliteStore.open(tmp_path / "bot.db")
        try:
            edge = SlackEdge(client, edits, store=store, first_post_wait_s=30.0)
            await store.ensure_session(KEY, {"edge": "slack", "channel": "C1", "thread_ts": "1.0"})
            edge.turn_started(KEY)
            edge.model_call_started(KEY)
            edge.text_delta(KEY, "Short ")
            await slack.wait_for(lambda: slack.assistant_statuses, WAIT_S)  # the first words arrived meanwhile
            edge.text_delta(KEY, "answer.")
            edge.text_done(KEY)
            await edge.close(WAIT_S)
            [post] = slack.messages("C1")
            assert (post.text, post.edits) == ("Short answer.", [])
        finally:
            await edits.close(WAIT_S)
            await store.close()


async def test_an_answer_goes_ahead_of_another_threads_status_message(tmp_path: Path) -> None:
    """In a busy channel, a thread's answer does not wait behind the status messages of other threads."""
    async with FakeSlack() as slack:
        client = SlackClient(token="xoxb-test", base_url=slack.api_url)
        edits = EditScheduler(client)
        await edits.start()
        store = await SqliteStore.open(tmp_path / "bot.db")
        posts = PostQueue(client)
        edge = SlackEdge(client, edits, store=store, team_id="T1", first_post_wait_s=0.0, posts=posts)
        try:
            keys, roots = {}, []
            for name in "ABC":
                root = slack.user_message("C1", f"<@UBOT> {name}", user="U1")["ts"]
                keys[name] = f"slack:T1:C1:{root}"
                roots.append(root)
                address = {"edge": "slack", "team": "T1", "channel": "C1", "thread_ts": root, "requester": "U1"}
                await store.ensure_session(keys[name], address)
            release = slack.hold("chat.postMessage")
            edge.calls_started(keys["A"], [ToolCall("toolu_a", keys["A"], "t", "sleep_for", {"seconds": 9})])
            await slack.wait_for(lambda: slack.pending, WAIT_S, "A's status message at Slack")
            edge.calls_started(keys["C"], [ToolCall("toolu_c", keys["C"], "t", "sleep_for", {"seconds": 9})])
            edge.text_delta(keys["B"], "B's answer.")
            edge.text_done(keys["B"])
            async with asyncio.timeout(WAIT_S):
                while posts.waiting < 2:  # noqa: ASYNC110 - no time is waited for: the loop lets the queues run
                    await asyncio.sleep(0)
            release.set()
            await edge.close(WAIT_S)
            bot = [m for m in slack.messages("C1") if m.is_bot]
            assert [m.thread_root for m in bot] == roots, "A's status was on the wire; then B's answer, C's status"
            assert bot[1].text == "B's answer." and "sleep_for" in bot[2].text
        finally:
            await edits.close(WAIT_S)
            await store.close()


async def test_a_long_streamed_answer_becomes_several_messages(rig: Rig) -> None:
    # Past BOT_UPLOAD_OVER_CHARS the answer is uploaded as a file; when Slack refuses that, it is split instead.
    rig.slack.fail("files.getUploadURLExternal", status=200, error="missing_scope")
    paragraphs = [f"Part {i}: " + "lorem ipsum " * 60 for i in range(20)]
    text = "\n\n".join(paragraphs)
    for start in range(0, len(text), 500):
        rig.edge.text_delta(KEY, text[start : start + 500])
    rig.edge.text_done(KEY)
    await rig.settle()
    posts = rig.posts()
    assert len(posts) >= 4 and all(len(post.text) <= 3_900 for post in posts)
    assert " ".join(post.text for post in posts).split() == text.split()


async def test_a_status_message_follows_its_calls_to_the_end(rig: Rig) -> None:
    first = ToolCall("toolu_a", KEY, "t", "sleep_for", {"seconds": 2})
    second = ToolCall("toolu_b", KEY, "t", "wordcount", {"text": "a b"})
    rig.edge.calls_started(KEY, [first, second])
    [status] = await rig.slack.wait_for(lambda: rig.posts(), WAIT_S)
    assert status.text.count("⏸️") == 2
    first.transition(CallStatus.RUNNING)
    first.add_progress(ProgressKind.PARTIAL, {"message": "slept 1s of 2s"})
    rig.edge.call_changed(first)
    await rig.slack.wait_for(lambda: "slept 1s of 2s" in status.text, WAIT_S)
    assert [b.get("accessory", {}).get("value") for b in status.blocks or []] == ["toolu_a", "toolu_b"]
    second.transition(CallStatus.RUNNING)
    second.transition(CallStatus.COMPLETED)
    rig.edge.call_changed(second)
    first.transition(CallStatus.CANCELLED)
    first.cancelled_by = "U1"
    rig.edge.call_changed(first)
    await rig.slack.wait_for(lambda: "cancelled by <@U1>" in status.text and "✅" in status.text, WAIT_S)
    assert not any("accessory" in block for block in status.blocks or [])
    assert rig.edge.board.find("C1", status.ts) is not None
    assert rig.edge.board.open_messages() == 0


async def test_a_turn_cancelled_mid_answer_keeps_what_was_said(rig: Rig) -> None:
    rig.edge.text_delta(KEY, "Half an ans")
    rig.edge.turn_finished(TurnOutcome(KEY, cancelled_by="U1"))
    await rig.settle()
    assert [post.text for post in rig.posts()] == ["Half an ans", "🛑 Stopped by <@U1>."]


async def test_thinking_is_cleared_when_a_turn_ends_without_a_post(rig: Rig) -> None:
    rig.edge.turn_started(KEY)
    rig.edge.model_call_started(KEY)
    rig.edge.turn_finished(TurnOutcome(KEY))
    await rig.settle()
    assert rig.slack.assistant_status("C1", rig.root) == ""
    assert rig.posts() == []


async def owed_reminder(rig: Rig, text: str, *, requester: str | None = "U1") -> list[tuple[int, OwedLine]]:
    """A reminder claimed in the store, which owes its post in the claim: what the scheduler hands the edge."""
    item = NewReminder(KEY, ReminderKind.REMINDER, text, utcnow(), requester=requester)
    reminder = await rig.store.add_reminder(item)
    claimed = await rig.store.claim_reminder(
        reminder.id, due_at=reminder.due_at, outcome=ReminderStatus.FIRED, owed=text
    )
    assert claimed is not None
    return list(claimed.owed_lines)


async def test_reminders_and_notices_go_into_the_thread(rig: Rig) -> None:
    lines = await owed_reminder(rig, "stand-up in 5 minutes")
    assert rig.edge.lines_owed(lines) is False, "the edge settles what it owes once Slack has it"
    rig.edge.notice(KEY, "⚠️ Model error: overloaded")
    await rig.settle()
    assert [post.text for post in rig.posts()] == ["<@U1> ⏰ stand-up in 5 minutes", "⚠️ Model error: overloaded"]
    [(line_id, line)] = lines
    assert line.kind is LineKind.REMINDER
    assert rig.posts()[0].extra["metadata"] == marker(line_id)
    assert await rig.store.owed_messages() == []


async def test_a_reminder_found_in_the_thread_is_not_posted_again(rig: Rig) -> None:
    """After a 500 that Slack answered once it had stored the post, or a kill before it was confirmed."""
    [(landed, _)] = await owed_reminder(rig, "stretch")
    [(owed, _)] = await owed_reminder(rig, "stretch")
    client = SlackClient(token="xoxb-test", base_url=rig.slack.api_url)
    await client.chat_postMessage(channel="C1", thread_ts=rig.root, text="<@U1> ⏰ stretch", metadata=marker(landed))
    outbox = rig.edge.threads.outbox
    assert outbox is not None
    rig.edge.take_over(await rig.store.owed_messages())  # as a restart (or a replica taking over) finds them
    assert await outbox.idle(WAIT_S)
    assert [post.text for post in rig.posts()] == ["<@U1> ⏰ stretch", "<@U1> ⏰ stretch"]
    assert [post.extra["metadata"] for post in rig.posts()] == [marker(landed), marker(owed)]
    assert outbox.duplicates_avoided == 1
    replies = [c for c in rig.slack.calls_to("conversations.replies") if c.params.get("include_all_metadata")]
    assert len(replies) == 2
    assert await rig.store.owed_messages() == []


async def test_a_reminder_slack_refuses_is_dropped_and_one_it_cannot_check_is_retried(rig: Rig) -> None:
    rig.slack.fail("chat.postMessage", status=200, error="channel_not_found")
    rig.edge.lines_owed(await owed_reminder(rig, "never"))
    await rig.settle()
    assert rig.posts() == [] and await rig.store.owed_messages() == []
    # A post that may have landed is checked for first; a thread Slack will not show now is checked again later.
    rig.slack.fail("conversations.replies", status=429, retry_after=1)
    await owed_reminder(rig, "again")
    rig.edge.take_over(await rig.store.owed_messages())
    outbox = rig.edge.threads.outbox
    assert outbox is not None
    assert await outbox.idle(WAIT_S)
    assert [post.text for post in rig.posts()] == ["<@U1> ⏰ again"]
    assert len([c for c in rig.slack.calls_to("conversations.replies") if c.status == 429]) == 1
    # A 500 is retried by the channel's post queue itself, within its own bound: the reminder lands once.
    rig.slack.fail("chat.postMessage", status=500)
    rig.edge.lines_owed(await owed_reminder(rig, "once more"))
    await rig.settle()
    assert [post.text for post in rig.posts()] == ["<@U1> ⏰ again", "<@U1> ⏰ once more"]


async def test_a_post_the_edge_is_sending_is_not_taken_up_by_the_outbox_as_well(rig: Rig) -> None:
    """At a start the outbox reads what is owed while the scheduler may already fire: a reminder the edge is
    posting at that moment is still the edge's, and lands once."""
    release = rig.slack.hold("chat.postMessage")
    rig.edge.lines_owed(await owed_reminder(rig, "stretch"))
    await rig.slack.wait_for(lambda: rig.slack.pending, WAIT_S, "the edge's post in flight")
    rig.edge.take_over(await rig.store.owed_messages())
    assert rig.edge.threads.outbox.owed == 0, "the post in flight is still the edge's"
    release.set()
    await rig.settle()
    assert [post.text for post in rig.posts()] == ["<@U1> ⏰ stretch"]
    assert await rig.store.owed_messages() == []


@pytest.mark.parametrize("by", ["edge", "outbox"])
async def test_a_reminder_in_a_session_with_no_thread_yet_opens_it(rig: Rig, by: str) -> None:
    """A heartbeat session has no thread until it says something: a reminder due there is its first post,
    whether the edge posts it at once or the outbox delivers it (after a restart, say)."""
    key = "heartbeat:C9"
    await rig.store.ensure_session(key, {"edge": "slack", "channel": "C9", "thread_ts": None})
    reminder = await rig.store.add_reminder(NewReminder(key, ReminderKind.REMINDER, "water the plants", utcnow()))
    claimed = await rig.store.claim_reminder(
        reminder.id, due_at=reminder.due_at, outcome=ReminderStatus.FIRED, owed=reminder.text
    )
    assert claimed is not None
    if by == "edge":
        rig.edge.lines_owed(list(claimed.owed_lines))
    else:
        rig.edge.take_over(await rig.store.owed_messages())
        assert await rig.edge.threads.outbox.idle(WAIT_S)
    rig.edge.notice(key, "and in its thread")
    await rig.settle()
    top, then = rig.slack.messages("C9")
    assert (top.text, top.thread_ts) == ("⏰ water the plants", None)
    assert (then.text, then.thread_ts) == ("and in its thread", top.ts)
    session = await rig.store.get_session(key)
    assert session is not None and session.address["thread_ts"] == top.ts


async def test_a_heartbeat_says_nothing_when_all_is_well_and_opens_a_thread_otherwise(rig: Rig) -> None:
    key = "heartbeat:C9"
    address = {"edge": "slack", "channel": "C9", "thread_ts": None, "quiet_reply": "HEARTBEAT_OK"}
    await rig.store.ensure_session(key, address)
    rig.edge.turn_started(key)
    rig.edge.model_call_started(key)
    for piece in ["HEART", "BEAT_", "OK"]:
        rig.edge.text_delta(key, piece)
    rig.edge.text_done(key)
    rig.edge.turn_finished(TurnOutcome(key, text="HEARTBEAT_OK"))
    await rig.settle()
    assert rig.slack.messages("C9") == []

    rig.edge.turn_started(key)
    rig.edge.model_call_started(key)
    for piece in ["The nightly", " build failed."]:
        rig.edge.text_delta(key, piece)
    rig.edge.text_done(key)
    rig.edge.turn_finished(TurnOutcome(key, text="The nightly build failed."))
    rig.edge.notice(key, "one more thing")
    await rig.settle()
    top, follow_up = rig.slack.messages("C9")
    assert (top.text, top.thread_ts) == ("The nightly build failed.", None)
    assert (follow_up.text, follow_up.thread_ts) == ("one more thing", top.ts)
    assert not top.edits, "a quiet session's answer is posted once, not streamed"
    record = await rig.store.get_session(key)
    assert record is not None and record.address["thread_ts"] == top.ts
    assert await rig.store.resolve(f"slack:T1:C9:{top.ts}") == key


QUIET = {"edge": "slack", "channel": "C9", "thread_ts": None, "quiet_reply": "HEARTBEAT_OK"}


async def quiet_turn(rig: Rig, key: str, calls: list[ToolCall], answer: str) -> None:
    """A heartbeat turn that talks, runs a tool, warns, and ends on `answer`; the call is still running after."""
    await rig.store.ensure_session(key, QUIET)
    rig.edge.turn_started(key)
    rig.edge.model_call_started(key)
    rig.edge.text_delta(key, "Checking the build.")
    rig.edge.text_done(key)
    rig.edge.calls_started(key, calls)
    calls[0].transition(CallStatus.RUNNING)
    rig.edge.call_changed(calls[0])
    rig.edge.notice(key, "⚠️ slow network")
    await rig.slack.wait_for(lambda: rig.edge.busy_sessions == 0, WAIT_S)
    assert rig.slack.messages("C9") == [], "nothing shows while the turn may still end quietly"
    rig.edge.text_delta(key, answer)
    rig.edge.text_done(key)
    rig.edge.turn_finished(TurnOutcome(key, text=answer))


async def test_a_quiet_turn_that_ends_well_posts_nothing_at_all(rig: Rig) -> None:
    call = ToolCall("toolu_hb", "heartbeat:q1", "t", "sleep_for", {"seconds": 60})
    await quiet_turn(rig, "heartbeat:q1", [call], "HEARTBEAT_OK")
    await rig.settle()
    call.add_progress(ProgressKind.PARTIAL, {"message": "still sleeping"})
    rig.edge.call_changed(call)
    await rig.settle()
    assert rig.slack.messages("C9") == []
    assert rig.slack.calls_to("chat.postMessage") == [] and rig.slack.calls_to("chat.update") == []
    assert rig.edge.board.open_messages() == 0, "the status message that was never posted is forgotten"


async def test_a_quiet_turn_with_news_posts_everything_it_held_in_order(rig: Rig) -> None:
    call = ToolCall("toolu_hb", "heartbeat:q2", "t", "sleep_for", {"seconds": 60})
    await quiet_turn(rig, "heartbeat:q2", [call], "The nightly build failed.")
    await rig.settle()
    root, status, notice, answer = rig.slack.messages("C9")
    assert (root.text, root.thread_ts) == ("Checking the build.", None)
    assert all(m.thread_ts == root.ts for m in (status, notice, answer))
    assert "⏳" in status.text and "Cancel" in str(status.blocks), "posted as the call is now, not as it began"
    assert (notice.text, answer.text) == ("⚠️ slow network", "The nightly build failed.")
    call.add_progress(ProgressKind.PARTIAL, {"message": "slept 30s of 60s"})
    rig.edge.call_changed(call)
    await rig.slack.wait_for(lambda: "slept 30s of 60s" in status.text, WAIT_S, "the status edited after release")
    call.transition(CallStatus.COMPLETED)
    rig.edge.call_changed(call)
    await rig.slack.wait_for(lambda: "✅" in status.text, WAIT_S, "the final status")


async def test_user_timezone_comes_from_users_info_once(rig: Rig) -> None:
    rig.slack.users["U1"] = {"tz": "Europe/Paris"}
    assert await rig.edge.sessions.user_timezone(KEY) == "Europe/Paris"
    assert await rig.edge.sessions.user_timezone(KEY) == "Europe/Paris"
    assert len(rig.slack.calls_to("users.info")) == 1
    assert await rig.edge.sessions.user_timezone("slack:T1:C1:nope") is None


async def test_the_profile_cache_keeps_only_the_people_asked_about_last(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessions_module, "REMEMBER_PROFILES", 2)
    sessions = rig.edge.sessions
    for user in ("U1", "U2", "U1", "U3"):  # U1 asked again: U2 is now the least recently used
        await sessions.speaker(user)

    def asked() -> list[str]:
        return [call.params["user"] for call in rig.slack.calls_to("users.info")]

    assert asked() == ["U1", "U2", "U3"]
    await sessions.speaker("U1")
    await sessions.speaker("U3")
    assert asked() == ["U1", "U2", "U3"], "the two asked about last are still cached"
    await sessions.speaker("U2")
    assert asked() == ["U1", "U2", "U3", "U2"], "U2, the least recently used, was forgotten: asked again"


async def test_request_messages_and_requesters_are_remembered(rig: Rig) -> None:
    rig.edge.sessions.note_request(KEY, "C1", "101.0", "U2")
    assert rig.edge.sessions.request_session("C1", "101.0") == KEY
    assert await rig.edge.sessions.requesters(KEY) == {"U1", "U2"}
    assert rig.edge.sessions.request_session("C1", "999.0") is None


async def test_after_a_crash_the_status_message_shows_its_calls_orphaned(rig: Rig) -> None:
    running = ToolCall("toolu_run", KEY, "t", "sleep_for", {"seconds": 60})
    done = ToolCall("toolu_done", KEY, "t", "wordcount", {"text": "a b"})
    running.transition(CallStatus.RUNNING)
    done.transition(CallStatus.RUNNING)
    done.transition(CallStatus.COMPLETED)
    await rig.store.save_calls([running, done])
    rig.edge.calls_started(KEY, [running, done])
    [status] = await rig.slack.wait_for(lambda: rig.posts(), WAIT_S)
    await rig.settle()  # the post and its display record are done: now the process "dies"
    assert (await rig.store.displays_of(["toolu_run"]))[f"C1:{status.ts}"]

    orphans = await rig.store.orphan_open_calls()
    client = SlackClient(token="xoxb-test", base_url=rig.slack.api_url)
    restarted = SlackEdge(client, rig.edits, store=rig.store, team_id="T1")
    await restarted.repaint(orphans)
    await rig.slack.wait_for(lambda: "👻" in status.text and "✅" in status.text, WAIT_S)
    assert not any("accessory" in block for block in status.blocks or []), "no Cancel button on a dead call"


def _blank_payloads(rig: Rig) -> list[str]:
    """Every post or edit the fake received with blank text or a block with blank text."""
    bad = []
    for call in rig.slack.calls_to("chat.postMessage") + rig.slack.calls_to("chat.update"):
        blocks = call.params.get("blocks") or []
        texts = [str(block.get("text") or "") for block in blocks if block.get("type") == "markdown"]
        if not str(call.params.get("text") or "").strip() or not all(t.strip() for t in texts):
            bad.append(f"{call.method} {call.params!r:.200}")
    return bad


async def test_no_post_or_edit_is_ever_empty(rig: Rig) -> None:
    """The answer that once made `chat.update` send `text: ""` with an empty markdown block, streamed and whole."""
    text = "intro " * 420 + "\n\n   \n" + "y" * 5000
    for start in range(0, len(text), 700):
        rig.edge.text_delta(KEY, text[start : start + 700])
    rig.edge.text_done(KEY)
    await rig.settle()
    assert _blank_payloads(rig) == []
    assert "".join(post.text for post in rig.posts()).replace(" ", "") == text.replace(" ", "").replace("\n", "")


async def test_the_last_guard_refuses_empty_messages(rig: Rig) -> None:
    assert await rig.edge.threads.post(KEY, "  \n", [{"type": "markdown", "text": " "}]) is None
    rig.edits.update("C1", rig.root, text="", blocks=[{"type": "markdown", "text": "\n"}], final=True)
    where = await rig.edge.threads.post(
        KEY, "", [{"type": "markdown", "text": "shown"}, {"type": "markdown", "text": ""}]
    )
    await rig.settle()
    assert where is not None and rig.slack.calls_to("chat.update") == []
    [call] = rig.slack.calls_to("chat.postMessage")
    assert (call.params["text"], call.params["blocks"]) == ("shown", [{"type": "markdown", "text": "shown"}])


BROADCASTS = "<!channel> <!here|here> <!everyone> <!subteam^S0123|@oncall> @channel @here @everyone <@U999>"
_LIVE_MENTION = re.compile(r"<[!@][^>]*>|@(?:channel|here|everyone)\b", re.IGNORECASE)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _live_mentions(rig: Rig) -> list[str]:
    """Every mention Slack would notify for, in the text and blocks of every post and edit the fake received."""
    found = []
    for call in rig.slack.calls_to("chat.postMessage") + rig.slack.calls_to("chat.update"):
        for string in _strings(call.params.get("text")) + _strings(call.params.get("blocks")):
            found += _LIVE_MENTION.findall(string)
    return found


async def test_mentions_in_model_text_tool_output_and_reminders_notify_nobody(rig: Rig) -> None:
    rig.edge.turn_started(KEY)
    rig.edge.model_call_started(KEY)
    rig.edge.text_delta(KEY, f"Answer: {BROADCASTS}")
    rig.edge.text_done(KEY)
    call = ToolCall("toolu_m", KEY, "t", "run_command", {"command": f"echo '{BROADCASTS}'"})
    rig.edge.calls_started(KEY, [call])
    await rig.slack.wait_for(lambda: len(rig.posts()) == 1, WAIT_S)  # the words before the call are on its status
    call.transition(CallStatus.RUNNING)
    call.add_progress(ProgressKind.LOG, {"line": BROADCASTS})
    rig.edge.call_changed(call)
    await rig.slack.wait_for(lambda: "oncall" in rig.posts()[0].text.partition("\n")[2], WAIT_S)
    call.transition(CallStatus.FAILED)
    call.error = f"exit 1: {BROADCASTS}"
    rig.edge.call_changed(call)
    rig.edge.notice(KEY, f"⚠️ Tool error: {BROADCASTS}")
    rig.edge.lines_owed(await owed_reminder(rig, f"stand-up {BROADCASTS}"))
    rig.edge.turn_finished(TurnOutcome(KEY, text="", cancelled_by="U1"))
    await rig.settle()

    assert _live_mentions(rig) == ["<@U1>", "<@U1>"], "only the reminder's asker and who stopped the turn"
    reminder = next(post for post in rig.posts() if "⏰" in post.text)
    assert reminder.text.startswith("<@U1> ⏰ stand-up")
    assert "@\u2060oncall" in reminder.text and "@\u2060here" in rig.posts()[0].text  # still readable
    assert all(c.params.get("parse") == "none" for c in rig.slack.calls_to("chat.postMessage"))


async def test_thinking_is_shown_again_for_every_model_call_of_a_turn(rig: Rig) -> None:
    """Slack clears the indicator on the bot's first post (and after two minutes): each model call sets it anew."""
    rig.edge.turn_started(KEY)
    rig.edge.model_call_started(KEY)
    rig.edge.text_delta(KEY, "Let me check.")
    rig.edge.text_done(KEY)
    rig.edge.calls_started(KEY, [ToolCall("toolu_t", KEY, "t", "now", {}, status=CallStatus.COMPLETED)])
    rig.edge.model_call_started(KEY)
    rig.edge.text_delta(KEY, "Done.")
    rig.edge.text_done(KEY)
    rig.edge.turn_finished(TurnOutcome(KEY, text="Done."))
    await rig.settle()
    methods = [c.method for c in rig.slack.calls if c.method in {"chat.postMessage", "assistant.threads.setStatus"}]
    assert methods == [
        "assistant.threads.setStatus",
        "chat.postMessage",  # the status message, with "Let me check." above its call
        "assistant.threads.setStatus",
        "chat.postMessage",
    ]
    assert [status for _, _, status in rig.slack.assistant_statuses] == ["is thinking…", "is thinking…"]


def test_the_manifest_declares_an_agent_not_an_assistant() -> None:
    """`chat:write` covers setStatus; `assistant:write` is an agent's (prompts, titles); the assistant pane is not
    used (tests/test_slack_agent_surface.py checks the rest of the agent's declaration)."""
    manifest = (Path(__file__).resolve().parents[1] / "deploy" / "slack-manifest.yml").read_text()
    scopes = re.findall(r"^\s+- ([a-z_]+:[a-z_]+)", manifest, re.MULTILINE)
    assert "chat:write" in scopes and "assistant:write" in scopes
    assert "assistant_view" not in manifest and "agent_view" in manifest


async def test_every_update_of_a_status_message_has_new_block_ids(rig: Rig) -> None:
    call = ToolCall("toolu_r", KEY, "t", "sleep_for", {"seconds": 3})
    rig.edge.calls_started(KEY, [call])
    [status] = await rig.slack.wait_for(lambda: rig.posts(), WAIT_S)
    call.transition(CallStatus.RUNNING)
    for second in (1, 2):
        call.add_progress(ProgressKind.PARTIAL, {"message": f"slept {second}s of 3s"})
        rig.edge.call_changed(call)
        await rig.slack.wait_for(lambda: f"slept {second}s" in status.text, WAIT_S)  # noqa: B023
    call.transition(CallStatus.COMPLETED)
    rig.edge.call_changed(call)
    await rig.settle()
    ids = [tuple(block["block_id"] for block in revision.blocks or []) for revision in status.history]
    assert len(ids) >= 4 and len(set(ids)) == len(ids), ids
    assert all(block_id.startswith("call:toolu_r:") for revision in ids for block_id in revision)


async def test_only_the_turns_final_answer_gets_feedback_buttons(rig: Rig) -> None:
    rig.edge.turn_started(KEY)
    rig.edge.text_delta(KEY, "Let me look.")
    rig.edge.text_done(KEY)  # a preamble: tool calls follow
    rig.edge.text_delta(KEY, "Found it.")
    rig.edge.text_done(KEY)
    rig.edge.turn_finished(TurnOutcome(KEY, text="Found it.", turn_id=f"{KEY}#1"))
    rig.edge.turn_started(KEY)
    rig.edge.text_delta(KEY, "Half an ans")
    rig.edge.turn_finished(TurnOutcome(KEY, text="Half an ans", turn_id=f"{KEY}#2", cancelled_by="U1"))
    await rig.settle()
    rated = {m.text: [b for b in m.blocks or [] if b.get("type") == "context_actions"] for m in rig.posts()}
    assert not rated["Let me look."] and not rated["Half an ans"]
    [buttons] = rated["Found it."]
    assert buttons["elements"][0]["positive_button"]["value"] == f"good {KEY}#1"


async def test_thinking_skips_when_its_budget_is_spent_and_a_429_pauses_it(rig: Rig) -> None:
    """ "is thinking…" runs in the thread's queue: it never waits there for Slack's budget, it is left out."""
    now = [0.0]
    client = SlackClient(token="xoxb-test", base_url=rig.slack.api_url)
    thinking = ThinkingStatus(client, rig.edge.sessions, per_minute=6.0, clock=lambda: now[0])
    sent = lambda: len(rig.slack.calls_to("assistant.threads.setStatus"))  # noqa: E731
    for _ in range(THINKING_BURST):
        await thinking.show(KEY, True)
    assert sent() == THINKING_BURST
    await asyncio.wait_for(thinking.show(KEY, True), 1.0)
    assert (sent(), thinking.skipped) == (THINKING_BURST, 1), "no token: skipped, not waited for"
    now[0] += 10.0  # 6 a minute: one token back
    rig.slack.fail("assistant.threads.setStatus", status=429, retry_after=30)
    await thinking.show(KEY, True)
    assert rig.slack.rate_limited["assistant.threads.setStatus"] == 1
    now[0] += 20.0  # tokens again, but Slack asked for 30 s
    await thinking.show(KEY, True)
    assert (sent(), thinking.skipped) == (THINKING_BURST + 1, 2)
    now[0] += 11.0
    await thinking.show(KEY, True)
    assert sent() == THINKING_BURST + 2 and rig.slack.calls_to("assistant.threads.setStatus")[-1].ok


async def test_the_fake_limits_thinking_at_tier_3(rig: Rig) -> None:
    rig.slack.agent.limit_like_slack()
    client = SlackClient(token="xoxb-test", base_url=rig.slack.api_url)
    for _ in range(TIER_3_PER_MINUTE):
        await client.assistant_threads_setStatus(channel_id="C1", thread_ts=rig.root, status="is thinking…")
    with pytest.raises(SlackRateLimited):
        await client.assistant_threads_setStatus(channel_id="C1", thread_ts=rig.root, status="is thinking…")


async def test_an_agent_session_status_slack_holds_back_holds_no_post_of_the_turn(rig: Rig) -> None:
    """`agents.sessions.setStatus` has a sender of its own: a slow or paced status never sits in a thread's queue."""
    client = SlackClient(token="xoxb-test", base_url=rig.slack.api_url)
    agent_sessions = AgentSessions(client, rig.store)
    agent_sessions.start()
    edge = SlackEdge(
        client, rig.edits, store=rig.store, team_id="T1", first_post_wait_s=0.0, agent_sessions=agent_sessions
    )
    held = rig.slack.hold("agents.sessions.setStatus")
    try:
        edge.turn_started(KEY)
        edge.model_call_started(KEY)
        edge.text_delta(KEY, "Hello.")
        edge.text_done(KEY)
        edge.turn_finished(TurnOutcome(KEY, text="Hello."))
        await rig.slack.wait_for(lambda: rig.posts(), WAIT_S, "the answer, while its session's status is held")
        assert not rig.slack.calls_to("agents.sessions.setStatus"), "still held"
    finally:
        held.set()
        await edge.close(WAIT_S)
    assert rig.slack.agent.session_of("C1", rig.root) is not None


async def _a_tool_turn_after_its_words_were_posted(rig: Rig, *, words_done_first: bool) -> None:
    """The model's words reach Slack before the edge hears of the calls that follow them (a loaded loop: the
    words took longer than the first post's wait, or the calls' commit longer than the fold's)."""
    rig.edge.turn_started(KEY)
    rig.edge.model_call_started(KEY)
    rig.edge.text_delta(KEY, "Let me check.")
    if words_done_first:
        rig.edge.text_done(KEY)
    await rig.slack.wait_for(lambda: rig.posts(), WAIT_S, "the words, posted")
    if not words_done_first:
        rig.edge.text_done(KEY)
    call = ToolCall("toolu_p", KEY, "t", "sleep_for", {"seconds": 1})
    rig.edge.calls_started(KEY, [call])
    call.transition(CallStatus.RUNNING)
    rig.edge.call_changed(call)
    await rig.slack.wait_for(lambda: "sleep_for" in rig.posts()[0].text, WAIT_S, "the call on the words' message")
    call.transition(CallStatus.COMPLETED)
    rig.edge.call_changed(call)
    rig.edge.model_call_started(KEY)
    rig.edge.text_delta(KEY, "Rested.")
    rig.edge.text_done(KEY)
    rig.edge.turn_finished(TurnOutcome(KEY, text="Rested."))
    await rig.settle()


@pytest.mark.parametrize(
    "words_done_first", [False, True], ids=["words-slower-than-first-post", "calls-slower-than-fold"]
)
async def test_a_tool_turn_posts_twice_however_late_its_calls_are_heard_of(
    rig: Rig, words_done_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bot.slack.output.FOLD_WAIT_S", 0.01)
    await _a_tool_turn_after_its_words_were_posted(rig, words_done_first=words_done_first)
    status, answer = rig.posts()
    assert status.text.startswith("Let me check.") and "✅" in status.text and "sleep_for" in status.text
    assert answer.text == "Rested."


async def test_words_the_model_was_asked_again_after_keep_their_message_when_calls_come_later(rig: Rig) -> None:
    """Only the words just before a batch become its status message: an answer released (the model was asked
    again) stays what it was."""
    rig.edge.turn_started(KEY)
    rig.edge.model_call_started(KEY)
    rig.edge.text_delta(KEY, "Here is what I found.")
    rig.edge.text_done(KEY)
    rig.edge.model_call_started(KEY)  # no calls followed those words
    await rig.slack.wait_for(lambda: rig.posts(), WAIT_S, "the words, posted")
    call = ToolCall("toolu_q", KEY, "t", "sleep_for", {"seconds": 1})
    rig.edge.calls_started(KEY, [call])
    call.transition(CallStatus.RUNNING)
    call.transition(CallStatus.COMPLETED)
    rig.edge.call_changed(call)
    rig.edge.turn_finished(TurnOutcome(KEY, text="Here is what I found."))
    await rig.settle()
    words, status = rig.posts()
    assert words.text == "Here is what I found." and "✅" in status.text


async def test_a_finished_turns_answer_is_not_kept_in_the_sessions_state(rig: Rig) -> None:
    """The edge remembers thousands of idle sessions (their address, who asked): not their last answers."""
    rig.edge.turn_started(KEY)
    rig.edge.text_delta(KEY, "Here is the answer.")
    rig.edge.text_done(KEY)
    rig.edge.turn_finished(TurnOutcome(KEY, text="Here is the answer.", turn_id=f"{KEY}#1"))
    await rig.settle()
    assert [m.text for m in rig.posts()] == ["Here is the answer."]
    state = rig.edge.sessions.get(KEY)
    assert state.last_reply is None and state.reply is None
    assert state.unsent == []
