"""One turn's message in agent mode against the fake Slack, through the real SlackClient and slack_sdk's stream
helper: streamed while Slack lets it, rewritten with chat.update after (whichever call found the stream ended),
posted whole when Slack refuses to stream, and kept in the final journal for a process that dies mid-call."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from fakes.slack_api import FakeSlack
from fakes.slack_streams import task_cards

from bot.slack.client import SlackClient
from bot.slack.edits import EditScheduler
from bot.slack.journal import FinalJournal
from bot.slack.render import Block
from bot.slack.turn_stream import Phase, Place, StreamBudget, TurnMessage
from bot.store import OwedEdit
from bot.toolcall import CallStatus, ProgressKind, ToolCall

KEY = "slack:T1:C1:1.0"
WAIT_S = 10.0
PLACE = Place("C1", "1.0", "T1", "U1")


class Finals:
    """The final journal's store, in memory."""

    def __init__(self) -> None:
        self.owed: dict[tuple[str, str], OwedEdit] = {}

    async def owe_edits(self, edits: Sequence[OwedEdit]) -> None:
        self.owed.update(((edit.channel, edit.ts), edit) for edit in edits)

    async def settle_edits(self, landed: Sequence[tuple[str, str, str | None]]) -> None:
        for channel, ts, text in landed:
            owed = self.owed.get((channel, ts))
            if owed is not None and (text is None or owed.text == text):
                del self.owed[(channel, ts)]


class Rig:
    def __init__(self, slack: FakeSlack, client: SlackClient, edits: EditScheduler, finals: Finals) -> None:
        self.slack, self.client, self.edits, self.finals = slack, client, edits, finals
        self.refusals: list[str] = []
        self.posted: list[tuple[str, list[Block], bool]] = []
        self.post_backlog_s = 0.0  # how long the channel's posts are said to be backed up

    def turn(self, budget: StreamBudget | None = None, *, start_wait_s: float = WAIT_S) -> TurnMessage:
        async def post(text: str, blocks: list[Block], owed: bool) -> tuple[str, str] | None:
            self.posted.append((text, blocks, owed))
            answer = await self.client.chat_postMessage(channel="C1", thread_ts="1.0", text=text, blocks=blocks)
            return "C1", str(answer["ts"])

        return TurnMessage(
            KEY,
            client=self.client,
            edits=self.edits,
            budget=budget or StreamBudget(scale=100),
            post=post,
            post_backlog_s=lambda channel: self.post_backlog_s,
            refused=self.refusals.append,
            append_interval_s=0.01,
            start_wait_s=start_wait_s,
        )

    async def until(self, predicate: Any, what: str) -> Any:
        return await self.slack.wait_for(predicate, WAIT_S, what)


@pytest.fixture
async def rig(slack: FakeSlack, client: SlackClient) -> AsyncIterator[Rig]:
    finals = Finals()
    edits = EditScheduler(client, per_minute=6000, burst=100, min_interval_s=0.01, journal=FinalJournal(finals))
    await edits.start()
    try:
        yield Rig(slack, client, edits, finals)
    finally:
        await edits.close(timeout_s=2)


def sleeper(call_id: str = "toolu_1") -> ToolCall:
    return ToolCall(call_id, KEY, "t", "sleep_for", {"seconds": 9})


def shown(slack: FakeSlack, ts: str) -> tuple[str, list[tuple[str, str, str]]]:
    message = slack.message("C1", ts)
    return message.text, task_cards(message.blocks)


class HeldStarts(StreamBudget):
    """A stream budget with no `chat.startStream` token to be had until `release` is set; counts what is spent."""

    def __init__(self) -> None:
        super().__init__(scale=100)
        self.spent: Counter[str] = Counter()
        self.release = asyncio.Event()
        self.asked = asyncio.Event()

    def wait_s(self, *methods: str) -> float:
        if "chat.startStream" in methods and not self.release.is_set():
            return 60.0
        return super().wait_s(*methods)

    def try_spend(self, *methods: str) -> bool:
        self.asked.set()
        taken = super().try_spend(*methods)
        if taken:
            self.spent.update(methods)
        return taken

    async def spend(self, method: str) -> None:
        self.spent[method] += 1
        await super().spend(method)


def streamed(slack: FakeSlack) -> list[str]:
    return [call.method for call in slack.calls if call.method.startswith("chat.") and "Stream" in call.method]


async def test_a_final_turn_with_no_start_token_is_posted_whole_at_once(rig: Rig) -> None:
    """Starts are the workspace's scarce token: a turn that is over does not wait for one, it is posted."""
    budget = HeldStarts()
    turn = rig.turn(budget, start_wait_s=WAIT_S)
    turn.add_text("Quick answer.")
    turn.end_text()
    turn.finish()
    await asyncio.wait_for(turn.open(PLACE), WAIT_S / 2)
    assert turn.phase is Phase.DONE
    assert [(text, owed) for text, _, owed in rig.posted] == [("Quick answer.", True)]
    assert shown(rig.slack, turn.ts or "")[0] == "Quick answer."
    assert not budget.spent and not streamed(rig.slack) and not rig.slack.calls_to("chat.update")


async def test_a_turn_that_ends_while_it_waits_for_a_start_is_posted_whole_once(rig: Rig) -> None:
    budget = HeldStarts()
    turn, call = rig.turn(budget, start_wait_s=WAIT_S), sleeper()
    turn.add_text("Let me check.")
    turn.end_text()
    turn.add_calls([call])
    opening = asyncio.create_task(turn.open(PLACE))
    await asyncio.wait_for(budget.asked.wait(), WAIT_S)
    assert not opening.done(), "not final: it waits a moment for a start"
    call.transition(CallStatus.RUNNING)
    call.transition(CallStatus.COMPLETED)
    turn.changed(call)
    turn.add_text("Done.")
    turn.finish()
    await asyncio.wait_for(opening, WAIT_S / 2)
    assert turn.phase is Phase.DONE and len(rig.posted) == 1 and rig.posted[0][2], "one post, owed"
    text, cards = shown(rig.slack, turn.ts or "")
    assert text == "Let me check.\n\nDone." and [status for _, status, _ in cards] == ["complete"]
    assert not streamed(rig.slack) and not rig.slack.calls_to("chat.update")


async def test_a_turn_still_running_when_no_start_comes_is_posted_and_kept_current_by_edits(rig: Rig) -> None:
    budget = HeldStarts()
    turn, call = rig.turn(budget, start_wait_s=0.2), sleeper()
    turn.add_text("Let me check.")
    turn.add_calls([call])
    await asyncio.wait_for(turn.open(PLACE), WAIT_S)
    assert turn.phase is Phase.EDITING and len(rig.posted) == 1 and not rig.posted[0][2], "posted as progress"
    await rig.edits.idle(5)
    assert not rig.slack.calls_to("chat.update"), "nothing changed since the post: no edit"
    call.transition(CallStatus.RUNNING)
    call.add_progress(ProgressKind.PARTIAL, {"message": "slept 2s of 9s"})
    turn.changed(call)
    await rig.until(lambda: "slept 2s of 9s" in str(shown(rig.slack, turn.ts or "")[1]), "progress by chat.update")
    await rig.until(lambda: rig.finals.owed, "what a restart must show, kept")
    budget.release.set()  # a start token now changes nothing for this turn: it has its message
    call.transition(CallStatus.COMPLETED)
    turn.changed(call)
    turn.finish()
    await rig.until(lambda: turn.phase is Phase.DONE, "the final edit")
    await rig.edits.idle(5)
    assert [status for _, status, _ in shown(rig.slack, turn.ts or "")[1]] == ["complete"]
    assert len(rig.posted) == 1 and not streamed(rig.slack)


async def test_a_start_token_that_comes_within_the_wait_streams_the_turn(rig: Rig) -> None:
    budget = HeldStarts()
    turn, call = rig.turn(budget, start_wait_s=WAIT_S), sleeper()
    turn.add_text("Let me check.")
    turn.add_calls([call])
    opening = asyncio.create_task(turn.open(PLACE))
    await asyncio.wait_for(budget.asked.wait(), WAIT_S)
    budget.release.set()
    turn.add_text(" Still here.")  # news wakes the wait, which finds the token
    await asyncio.wait_for(opening, WAIT_S / 2)
    assert turn.phase is Phase.STREAMING and not rig.posted
    assert budget.spent["chat.startStream"] == 1


async def test_words_and_cards_stream_into_one_message_that_closes_when_its_calls_are_final(rig: Rig) -> None:
    turn, call = rig.turn(), sleeper()
    turn.add_text("Let me ")
    await turn.open(PLACE)
    assert turn.phase is Phase.STREAMING and turn.ts is not None
    turn.add_text("check.")
    turn.end_text()
    turn.add_calls([call])
    call.transition(CallStatus.RUNNING)
    call.add_progress(ProgressKind.PARTIAL, {"message": "slept 1s of 9s"})
    turn.changed(call)
    await rig.until(lambda: "slept 1s of 9s" in str(shown(rig.slack, turn.ts or "")[1]), "progress in the card")
    turn.finish()
    assert turn.phase is Phase.STREAMING, "the turn is over, its call is not: the message stays open"
    call.transition(CallStatus.COMPLETED)
    turn.changed(call)
    turn.add_text("Done.")
    await rig.until(lambda: turn.phase is Phase.DONE, "the stream stopped")
    text, cards = shown(rig.slack, turn.ts or "")
    assert text == "Let me check.\n\nDone."
    assert [status for _, status, _ in cards] == ["complete"]
    stream = rig.slack.streams.of("C1", turn.ts or "")
    assert stream is not None and stream.ended_by == "stop" and stream.recipient == ("T1", "U1")
    assert not rig.slack.calls_to("chat.update")
    await rig.edits.idle(2)
    await asyncio.sleep(0)  # the journal writes behind
    assert not rig.finals.owed, "a stream that closed owes nothing"


@pytest.mark.parametrize("point", ["chat.appendStream", "chat.stopStream"])
async def test_a_stream_slack_ended_is_rewritten_whole_and_its_unsent_text_is_kept(rig: Rig, point: str) -> None:
    turn, call = rig.turn(), sleeper()
    turn.add_text("Starting.")
    turn.add_calls([call])
    await turn.open(PLACE)
    rig.slack.streams.expire_before(point)
    if point == "chat.appendStream":
        turn.add_text(" Text that never reached the stream.")
        await rig.until(lambda: turn.phase is Phase.EDITING, "the fall back to chat.update")
        call.transition(CallStatus.RUNNING)
        call.add_progress(ProgressKind.PARTIAL, {"message": "slept 3s of 9s"})
        turn.changed(call)
        await rig.until(lambda: "slept 3s of 9s" in str(shown(rig.slack, turn.ts or "")[1]), "progress by chat.update")
    else:
        turn.add_text(" Text that never reached the stream.")
    call.transition(CallStatus.COMPLETED)
    turn.changed(call)
    turn.finish()
    await rig.until(lambda: turn.phase is Phase.DONE, "the final state")
    await rig.edits.idle(5)
    text, cards = shown(rig.slack, turn.ts or "")
    assert text == "Starting. Text that never reached the stream."
    assert [status for _, status, _ in cards] == ["complete"]
    assert rig.slack.calls_to("chat.update")[-1].ok


async def test_a_refused_start_posts_the_turn_whole_and_edits_it(rig: Rig) -> None:
    rig.slack.streams.refusal = "not_authorized"
    turn, call = rig.turn(), sleeper()
    turn.add_calls([call])
    await turn.open(PLACE)
    assert rig.refusals == ["not_authorized"]
    assert turn.phase is Phase.EDITING and len(rig.posted) == 1 and not rig.posted[0][2]
    call.transition(CallStatus.RUNNING)
    call.transition(CallStatus.COMPLETED)
    turn.changed(call)
    turn.finish()
    await rig.until(lambda: turn.phase is Phase.DONE, "the final edit")
    await rig.edits.idle(5)
    assert [s for _, s, _ in shown(rig.slack, turn.ts or "")[1]] == ["complete"]


async def test_a_channel_stream_without_its_recipient_is_refused_as_slack_does(rig: Rig) -> None:
    turn = rig.turn()
    turn.add_text("Hello.")
    await turn.open(Place("C1", "1.0", "", None))
    assert rig.refusals == ["missing_recipient_team_id"]
    assert turn.phase is Phase.EDITING, "posted instead"


async def test_what_a_restart_must_show_is_kept_while_the_message_streams(rig: Rig) -> None:
    turn, call = rig.turn(), sleeper()
    turn.add_text("Long one.")
    turn.add_calls([call])
    await turn.open(PLACE)
    call.transition(CallStatus.RUNNING)
    turn.changed(call)
    await rig.until(lambda: rig.finals.owed, "the state kept for a restart")
    kept = next(iter(rig.finals.owed.values()))
    assert [status for _, status, details in task_cards(kept.blocks) if "orphaned" in details] == ["error"]
    assert "Long one." in kept.text
    assert rig.slack.message("C1", turn.ts or "").history[-1].blocks != kept.blocks, "kept, not sent"


async def test_a_429_on_append_pauses_the_stream_and_loses_nothing(rig: Rig) -> None:
    turn = rig.turn()
    turn.add_text("One")
    await turn.open(PLACE)
    rig.slack.fail("chat.appendStream", status=429, retry_after=1)
    turn.add_text(" two")
    await rig.until(lambda: rig.slack.rate_limited["chat.appendStream"] or None, "the 429")
    turn.add_text(" three.")
    turn.finish()
    await rig.until(lambda: turn.phase is Phase.DONE, "the stream stopped")
    assert shown(rig.slack, turn.ts or "")[0] == "One two three."
    assert not rig.slack.calls_to("chat.update"), "a pause is not the end of the stream"


async def waits_for_its_end_and_is_one_post(rig: Rig) -> None:
    """A turn with a call running and no start to be had, its start wait 0: held back by a backlog (the
    caller's), it is not posted while it runs, and once over it is one owed post, final, with no edit."""
    budget = HeldStarts()
    turn, call = rig.turn(budget, start_wait_s=0.0), sleeper()
    turn.add_text("Let me check.")
    turn.end_text()
    turn.add_calls([call])
    opening = asyncio.create_task(turn.open(PLACE))
    await asyncio.wait_for(budget.asked.wait(), WAIT_S)
    assert not rig.posted, "with no backlog a start wait of 0 would have posted it already"
    call.transition(CallStatus.RUNNING)
    call.transition(CallStatus.COMPLETED)
    turn.changed(call)
    turn.add_text("Done.")
    turn.finish()
    await asyncio.wait_for(opening, WAIT_S)
    assert turn.phase is Phase.DONE and [owed for *_, owed in rig.posted] == [True], "one post, owed"
    assert [status for _, status, _ in shown(rig.slack, turn.ts or "")[1]] == ["complete"]
    assert not [c for c in rig.slack.calls_to("chat.update") if c.params.get("channel") == "C1"]


async def test_a_turn_waits_for_its_end_while_its_channels_posts_are_backed_up_and_is_then_one_post(
    rig: Rig,
) -> None:
    """Posted now, the message would only wait in its channel's line and land showing what it showed when
    queued: so it waits (past `start_wait_s`) for a start or for its end."""
    rig.post_backlog_s = 600.0
    await waits_for_its_end_and_is_one_post(rig)


async def test_a_turn_waits_for_its_end_while_edits_are_backed_up_and_is_then_one_post(
    slack: FakeSlack, client: SlackClient
) -> None:
    """Posted now, the message could not show the turn's changes before the edits queued ahead of them have gone:
    so it waits (here far past `start_wait_s`) for a start or for its end."""
    edits = EditScheduler(client, per_minute=1, burst=1, journal=FinalJournal(Finals()))
    await edits.start()
    try:
        for i in range(30):  # other threads' final states, one a minute: half an hour of edits ahead
            edits.update("C9", f"{i}.0", text=f"done {i}", final=True)
        await waits_for_its_end_and_is_one_post(Rig(slack, client, edits, Finals()))
    finally:
        await edits.close(timeout_s=0.1)
