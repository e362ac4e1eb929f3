"""Agent mode (`BOT_SLACK_SURFACE=agent`) with the daemon as a process: one streamed message per turn, each call a
task card, and a message that outlives Slack's end of its stream (by its time limit, or at an append or the stop).

The fake Slack streams as Slack documents it (tests/fakes/slack_streams.py): its limit is seconds here, and
`expire_before` ends a stream just before the call it names, so both failure points are hit without waiting.
"""

from __future__ import annotations

import signal

import pytest
from daemon_rig import WAIT_S, World, bot_posts, mention, status_posts
from fakes.anthropic_api import Reply, tool_use
from fakes.slack_api import FakeSlack, StoredMessage
from fakes.slack_streams import task_cards

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]


def statuses(message: StoredMessage) -> list[str]:
    """Each status the message's first card went through, in order, without repeats."""
    seen: list[str] = []
    for revision in message.history:
        cards = task_cards(revision.blocks)
        if cards and (not seen or seen[-1] != cards[0][1]):
            seen.append(cards[0][1])
    return seen


async def start(world: World, surface: str = "agent") -> None:
    world.daemon.env["BOT_SLACK_SURFACE"] = surface
    await world.daemon.start()
    await world.daemon.connected()


async def the_turn(slack: FakeSlack, channel: str, thread_ts: str, needle: str) -> StoredMessage:
    """The thread's one bot message, once its text has `needle` and its card is final."""

    def done() -> StoredMessage | None:
        posts = bot_posts(slack, channel, thread_ts)
        last = posts[-1] if posts else None
        cards = task_cards(last.blocks) if last else []
        final = cards and all(status in ("complete", "error") for _, status, _ in cards)
        return last if last is not None and needle in last.text and final else None

    return await slack.wait_for(done, WAIT_S * 2, f"the turn's message with {needle!r} and final cards")


async def test_a_tool_turn_is_one_streamed_message_with_its_task_card(own: World) -> None:
    slack = own.slack
    own.script.add(
        "sleep 2 seconds",
        Reply.tools(tool_use("sleep_for", {"seconds": 2}), text="Sleeping a bit."),
        Reply.text_only("Rested."),
    )
    await start(own)
    event = await mention(slack, "C1", "sleep 2 seconds")
    message = await the_turn(slack, "C1", event["ts"], "Rested.")
    assert bot_posts(slack, "C1", event["ts"]) == [message]
    assert message.text == "Sleeping a bit.\n\nRested."
    assert statuses(message)[-2:] == ["in_progress", "complete"]
    assert set(statuses(message)) <= {"pending", "in_progress", "complete"}
    assert any("running" in details for r in message.history for _, _, details in task_cards(r.blocks))
    stream = slack.streams.of("C1", message.ts)
    assert stream is not None
    await slack.wait_for(lambda: stream.ended_by, WAIT_S, "the stream stopped")
    assert stream.ended_by == "stop"
    assert stream.recipient == ("T1", "U1")
    assert not slack.calls_to("chat.postMessage")
    assert not [c for c in slack.calls if not c.ok and c.method.startswith("chat.")]


@pytest.mark.parametrize("point", ["limit", "chat.appendStream", "chat.stopStream"])
async def test_a_call_outliving_its_stream_keeps_live_progress_and_lands_its_final_state(
    own: World, point: str
) -> None:
    slack = own.slack
    if point == "limit":
        slack.streams.limit_s = 1.5
    else:
        slack.streams.expire_before(point)
    own.script.add(
        "sleep 6 seconds",
        Reply.tools(tool_use("sleep_for", {"seconds": 6}), text="Working on it."),
        Reply.text_only("All done."),
    )
    await start(own)
    event = await mention(slack, "C1", "sleep 6 seconds")
    message = await the_turn(slack, "C1", event["ts"], "All done.")
    assert bot_posts(slack, "C1", event["ts"]) == [message]
    stream = slack.streams.of("C1", message.ts)
    assert stream is not None
    updates = await slack.wait_for(
        lambda: [c for c in slack.calls_to("chat.update") if c.ok],
        WAIT_S,
        "the message rewritten once its stream ended",
    )
    assert stream.ended_by in ("limit", "expired")
    assert message.text.startswith("Working on it.") and "All done." in message.text
    assert task_cards(message.blocks)[0][1] == "complete"
    assert "All done." in updates[-1].params["text"]
    if point != "chat.stopStream":  # progress after the stream ended came by chat.update
        progress = {
            details for c in updates for _, status, details in task_cards(c.params["blocks"]) if status == "in_progress"
        }
        assert progress, "live progress after the stream ended"


async def test_kill_9_mid_call_then_restart_lands_the_final_state(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    own.script.add("sleep 30 seconds", Reply.tools(tool_use("sleep_for", {"seconds": 30}), text="Long one."))
    await start(own)
    event = await mention(slack, "C1", "sleep 30 seconds")

    def running() -> StoredMessage | None:
        posts = bot_posts(slack, "C1", event["ts"])
        cards = task_cards(posts[-1].blocks) if posts else []
        return posts[-1] if cards and cards[0][1] == "in_progress" and "slept" in cards[0][2] else None

    message = await slack.wait_for(running, WAIT_S, "the call running in its card")
    assert daemon.process is not None
    daemon.process.send_signal(signal.SIGKILL)
    await daemon.process.wait()
    daemon.process = None
    await daemon.start()
    await daemon.connected(total=2)

    def landed() -> list[tuple[str, str, str]] | None:
        cards = task_cards(slack.message("C1", message.ts).blocks)
        return cards if cards and cards[0][1] == "error" else None

    cards = await slack.wait_for(landed, WAIT_S * 2, "the orphaned card")
    assert "orphaned" in cards[0][2]
    assert "Long one." in slack.message("C1", message.ts).text
    assert bot_posts(slack, "C1", event["ts"])[0].ts == message.ts


async def running_card(slack: FakeSlack, thread_ts: str) -> StoredMessage:
    def running() -> StoredMessage | None:
        posts = bot_posts(slack, "C1", thread_ts)
        cards = task_cards(posts[-1].blocks) if posts else []
        return posts[-1] if cards and cards[0][1] == "in_progress" else None

    return await slack.wait_for(running, WAIT_S, "the call running in its card")


async def test_a_cancel_reaction_on_the_turns_message_cancels_its_running_calls(own: World) -> None:
    slack = own.slack
    own.script.add("sleep long", Reply.tools(tool_use("sleep_for", {"seconds": 60}), text="On it."))
    await start(own)
    event = await mention(slack, "C1", "sleep long")
    message = await running_card(slack, event["ts"])
    await slack.wait_ack(await slack.send_event(slack.reaction_added("U1", "x", "C1", message.ts)))

    def cancelled() -> list[tuple[str, str, str]] | None:
        cards = task_cards(slack.message("C1", message.ts).blocks)
        return cards if cards and cards[0][1] == "error" else None

    cards = await slack.wait_for(cancelled, WAIT_S, "the cancelled card")
    assert cards[0][2] == "cancelled by @U1"


async def test_auto_falls_back_to_classic_when_slack_refuses_streams_with_one_log_line(own: World) -> None:
    slack = own.slack
    slack.streams.refusal = "not_authorized"
    for prefix in ("first sleep", "second sleep"):
        own.script.add(
            prefix, Reply.tools(tool_use("sleep_for", {"seconds": 1}), text="Sleeping."), Reply.text_only("Up.")
        )
    await start(own, "auto")
    first = await mention(slack, "C1", "first sleep")
    message = await the_turn(slack, "C1", first["ts"], "Up.")
    assert bot_posts(slack, "C1", first["ts"]) == [message], "the refused turn is posted whole, then edited"
    second = await mention(slack, "C1", "second sleep")
    await slack.wait_for(lambda: status_posts(slack, "C1", second["ts"]) or None, WAIT_S, "a classic status")
    assert len(slack.calls_to("chat.startStream")) == 1
    assert own.daemon.log().count("Slack refused chat.startStream (not_authorized)") == 1
