"""A turn in agent mode, rendered: a task per call (a stream's chunk and a rewrite's block say the same), and the
turn as one message within Block Kit's limits. Every payload is checked with slack_sdk's own models."""

from __future__ import annotations

from datetime import timedelta

import pytest
from slack_sdk.models.blocks import Block
from slack_sdk.models.messages.chunk import Chunk, TaskUpdateChunk

from bot.clock import utcnow
from bot.slack.task_cards import CUT, MAX_CARDS, TEXT_MAX_CHARS, task_block, task_chunk, turn_message
from bot.toolcall import CallStatus, Decision, ProgressKind, ToolCall

KEY = "slack:T1:C1:1.0"


def call(status: CallStatus = CallStatus.PENDING, **changes: object) -> ToolCall:
    made = ToolCall("toolu_1", KEY, "t", "sleep_for", {"seconds": 30})
    if status is not CallStatus.PENDING:
        made.transition(CallStatus.RUNNING)
        made.transition(status)
    for name, value in changes.items():
        setattr(made, name, value)
    return made


@pytest.mark.parametrize(
    ("status", "changes", "task", "words"),
    [
        (CallStatus.PENDING, {}, "pending", "pending (waiting for a free slot)"),
        (CallStatus.RUNNING, {}, "in_progress", "running"),
        (CallStatus.COMPLETED, {}, "complete", "done in"),
        (CallStatus.FAILED, {"error": "boom"}, "error", "failed: boom"),
        (CallStatus.FAILED, {"timed_out": True}, "error", "timed out after"),
        (CallStatus.CANCELLED, {"cancelled_by": "U1"}, "error", "cancelled by @U1"),
        (CallStatus.ORPHANED, {}, "error", "orphaned"),
    ],
)
def test_a_call_is_a_task_whose_details_say_what_its_status_cannot(
    status: CallStatus, changes: dict[str, object], task: str, words: str
) -> None:
    shown = call(status, **changes)
    chunk = task_chunk(shown)
    assert isinstance(Chunk.parse(chunk.to_dict()), TaskUpdateChunk)
    assert (chunk.id, chunk.title, chunk.status) == ("toolu_1", "sleep_for(seconds=30)", task)
    assert words in (chunk.details or "")
    block = Block.parse(task_block(shown))
    assert block is not None
    block.validate_json()
    assert block.to_dict()["status"] == task


def test_progress_shows_in_the_details_and_mentions_in_it_ping_nobody() -> None:
    running = call(CallStatus.RUNNING)
    running.started_at = utcnow() - timedelta(seconds=4)
    running.add_progress(ProgressKind.LOG, "deploying for <!here> and <@U9>")
    details = task_chunk(running).details or ""
    assert details.startswith("running 4s · deploying for @")
    assert "<!here>" not in details and "<@U9>" not in details


def test_a_call_waiting_for_a_person_is_pending_and_says_for_whom() -> None:
    asked = call(decision=Decision.ASKED, approvers=["U7"])
    chunk = task_chunk(asked)
    assert chunk.status == "pending" and chunk.details == "waiting for approval by @U7"


def test_the_turn_is_one_message_within_block_kits_limits() -> None:
    calls = [ToolCall(f"toolu_{i}", KEY, "t", "now", {}) for i in range(60)]
    text, blocks = turn_message("x" * (TEXT_MAX_CHARS + 10), calls, revision="3")
    assert len(blocks) == 1 + MAX_CARDS <= 50
    assert blocks[0]["type"] == "markdown" and blocks[0]["text"].endswith(CUT.strip())
    assert len(blocks[0]["text"]) <= 12_000
    assert [b["task_id"] for b in blocks[1:4]] == ["toolu_0", "toolu_1", "toolu_2"], "in the order asked for"
    for block in Block.parse_all(blocks):
        assert block is not None
        block.validate_json()
    assert len({b["block_id"] for b in blocks}) == len(blocks)
    assert len(text) <= 3_000


def test_a_turn_without_words_yet_says_its_calls_in_the_fallback_text() -> None:
    text, blocks = turn_message("", [call()])
    assert [b["type"] for b in blocks] == ["task_card"]
    assert text.startswith("sleep_for(seconds=30): pending")
