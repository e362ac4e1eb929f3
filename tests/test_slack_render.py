"""What the bot shows in Slack: status lines per call state, Block Kit, answers, reminders."""

from __future__ import annotations

from datetime import timedelta

from bot.calls.summary import call_label, icon, state_text
from bot.clock import utcnow
from bot.slack.render import (
    CANCEL_ACTION,
    MAX_CALL_BLOCKS,
    answer_message,
    call_line,
    escape,
    reminder_text,
    status_message,
    who,
)
from bot.toolcall import CallStatus, ProgressKind, ToolCall


def make_call(status: CallStatus = CallStatus.RUNNING, **fields: object) -> ToolCall:
    call = ToolCall("toolu_1", "slack:T1:C1:1.0", "turn", "sleep_for", {"seconds": 30}, status=status)
    now = utcnow()
    call.started_at = now - timedelta(seconds=12)
    if status.is_final:
        call.completed_at = call.started_at + timedelta(seconds=30)
    for name, value in fields.items():
        setattr(call, name, value)
    return call


def test_running_call_shows_elapsed_time_and_the_latest_progress() -> None:
    call = make_call()
    call.add_progress(ProgressKind.STARTED, {"tool": "sleep_for"})
    call.add_progress(ProgressKind.PARTIAL, {"slept_s": 12, "message": "slept 12s of 30s"})
    line = call_line(call, now=call.started_at + timedelta(seconds=12))  # type: ignore[operator]
    assert line == "⏳ `sleep_for(seconds=30)` — running 12s · slept 12s of 30s"


def test_log_progress_is_one_escaped_line() -> None:
    call = make_call(tool_name="run_command", input={"command": "make <all>"})
    call.add_progress(ProgressKind.LOG, "compiling a.c\n  & linking")
    line = call_line(call, now=call.started_at)
    assert line == "⏳ `run_command(command=make &lt;all&gt;)` — running 0s · compiling a.c &amp; linking"


def test_final_states() -> None:
    assert call_line(make_call(CallStatus.COMPLETED)) == "✅ `sleep_for(seconds=30)` — done in 30.0s"
    assert call_line(make_call(CallStatus.CANCELLED, cancelled_by="U123")).endswith("— cancelled by <@U123>")
    assert call_line(make_call(CallStatus.CANCELLED, cancelled_by="model: no longer needed")).endswith(
        "— cancelled by model: no longer needed"
    )
    assert call_line(make_call(CallStatus.CANCELLED)).endswith("— cancelled")
    assert call_line(make_call(CallStatus.FAILED, error="boom <3>")).startswith("❌ ")
    assert call_line(make_call(CallStatus.FAILED, error="boom <3>")).endswith("— failed: boom &lt;3&gt;")
    timed_out = call_line(make_call(CallStatus.FAILED, error="timed out", timed_out=True))
    assert timed_out.startswith("⌛ ") and "timed out after 30.0s" in timed_out
    assert call_line(make_call(CallStatus.ORPHANED)).startswith("👻 ")
    assert call_line(make_call(CallStatus.PENDING, started_at=None)).startswith("⏸️ `sleep_for(seconds=30)` — pending")


def test_slack_and_the_console_share_one_wording() -> None:
    """Slack's line is the plain summary with mentions, mrkdwn escaping and a code span; nothing of its own."""
    for call in [
        make_call(CallStatus.COMPLETED),
        make_call(CallStatus.CANCELLED, cancelled_by="U123"),
        make_call(CallStatus.FAILED, error="boom\nagain", timed_out=True),
        make_call(CallStatus.ORPHANED),
    ]:
        plain = f"{icon(call)} `{call_label(call)}` — {state_text(call)}"
        assert call_line(call) == plain.replace("by U123", "by <@U123>")
    assert state_text(make_call(CallStatus.CANCELLED, cancelled_by="U123")) == "cancelled by U123"
    assert state_text(make_call(CallStatus.FAILED, error="a < b")) == "failed: a < b", "plain text stays plain"
    assert call_line(make_call(CallStatus.FAILED, error="timed out", timed_out=True)).startswith("⌛ ")


def test_long_arguments_are_shortened_and_backticks_cannot_break_the_code_span() -> None:
    call = make_call(tool_name="wordcount", input={"text": "`tick` " + "long " * 100})
    line = call_line(call)
    signature = line.split("`")[1]
    assert signature.startswith("wordcount(text='tick' long")
    assert signature.endswith("…)") and len(signature) < 120


def test_status_message_has_a_cancel_button_per_open_call_only() -> None:
    running = make_call()
    done = make_call(CallStatus.COMPLETED, id="toolu_2")
    text, blocks = status_message([running, done])
    assert text.count("\n") == 1 and "⏳" in text and "✅" in text
    assert [block["type"] for block in blocks] == ["section", "section"]
    button = blocks[0]["accessory"]
    assert (button["action_id"], button["value"], button["text"]["text"]) == (CANCEL_ACTION, "toolu_1", "Cancel")
    assert "accessory" not in blocks[1]
    assert blocks[0]["block_id"] != blocks[1]["block_id"]


def test_a_huge_batch_stays_within_fifty_blocks() -> None:
    calls = [make_call(id=f"toolu_{i}") for i in range(70)]
    _, blocks = status_message(calls)
    assert len(blocks) == MAX_CALL_BLOCKS + 1
    assert blocks[-1]["elements"][0]["text"] == "…and 21 more calls"


def test_answers_go_out_as_markdown_blocks() -> None:
    assert answer_message("**bold**") == ("**bold**", [{"type": "markdown", "text": "**bold**"}])
    text, _ = answer_message("```py\nx = 1", streaming=True)
    assert text == "```py\nx = 1\n```", "a half-streamed code block is closed for display"


def test_small_helpers() -> None:
    assert escape("a < b & c > d") == "a &lt; b &amp; c &gt; d"
    assert who("U1") == "<@U1>" and who("W2ABC") == "<@W2ABC>" and who("shutdown") == "shutdown" and who(None)
    assert reminder_text("stand-up", "U7") == "<@U7> ⏰ stand-up"
    assert reminder_text("stand-up", None) == "⏰ stand-up"


def test_a_call_waiting_for_approval_shows_its_exact_arguments_and_the_buttons() -> None:
    from slack_sdk.models.blocks import Block

    from bot.slack.render import APPROVE_ACTION, ARGUMENTS_MAX_CHARS, DENY_ACTION, arguments_file
    from bot.toolcall import Decision

    command = "grep -r '<b>' . && echo ```done``` @here"
    call = ToolCall("toolu_A", "k", "t", "run_command", {"command": command})
    call.decision, call.approvers = Decision.ASKED, ["U1", "U2"]
    text, blocks = status_message([call])
    assert "waiting for approval by <@U1> or <@U2>" in text
    for block in Block.parse_all(blocks):
        block.validate_json()  # what Slack's own block models accept
    args = blocks[1]["text"]["text"]
    assert args.startswith("```") and args.endswith("```") and "'''done'''" in args, "a fence cannot end it early"
    assert "&lt;b&gt;" in args and "<!here>" not in args and "@\u2060here" in args
    assert [element["action_id"] for element in blocks[2]["elements"]] == [APPROVE_ACTION, DENY_ACTION, "cancel_call"]
    assert arguments_file(call) is None
    long = ToolCall("toolu_B", "k", "t", "run_command", {"command": "x" * (ARGUMENTS_MAX_CHARS + 1)})
    long.decision = Decision.ASKED
    _, blocks = status_message([long])
    assert arguments_file(long) == "arguments-toolu_B.txt" and "`arguments-toolu_B.txt`" in blocks[1]["text"]["text"]


def test_a_question_shows_its_options_as_buttons_that_slacks_models_accept() -> None:
    from slack_sdk.models.blocks import Block

    from bot.slack.render import ANSWER_ACTION, ANSWER_ACTIONS
    from bot.toolcall import Decision

    options = ["a" * 75, "<!channel> no", "maybe"]
    call = ToolCall("toolu_Q", "k", "t", "ask_user", {"question": "Go `now`? @here", "options": options})
    call.decision, call.approvers, call.requester = Decision.ASKED, ["U1", "UOPS"], "U1"
    text, blocks = status_message([call])
    assert icon(call) == "❓" and "waiting for an answer from <@U1> or <@UOPS>" in text
    for block in Block.parse_all(blocks):
        block.validate_json()  # what Slack's own block models accept
    question = blocks[1]["text"]["text"]
    assert question.startswith("❓ <@U1>, *a question for you:*") and "@\u2060here" in question
    elements = blocks[2]["elements"]
    assert [e["action_id"] for e in elements] == [f"{ANSWER_ACTION}:{n}" for n in range(3)] + [CANCEL_ACTION]
    assert all(ANSWER_ACTIONS.match(e["action_id"]) for e in elements[:3]) and {e["value"] for e in elements} == {
        "toolu_Q"
    }, "a button carries the call and the option's index, never the option's text"
    free = ToolCall("toolu_F", "k", "t", "ask_user", {"question": "Why?"}, decision=Decision.ASKED, requester="U1")
    _, blocks = status_message([free])
    assert (
        "your next reply here is the answer" in str(blocks[2])
        and blocks[3]["elements"][0]["action_id"] == CANCEL_ACTION
    )
    for block in Block.parse_all(blocks):
        block.validate_json()


def test_a_question_answered_or_unanswered_says_so() -> None:
    from bot.toolcall import Decision

    call = make_call(CallStatus.COMPLETED, tool_name="ask_user", decision=Decision.ANSWERED, decided_by="U1")
    call.input, call.result = {"question": "?"}, {"question": "?", "answer": "the <b> one", "answered_by": "U1"}
    assert call_line(call).endswith("answered by <@U1>: the &lt;b&gt; one")
    late = make_call(CallStatus.FAILED, tool_name="ask_user", decision=Decision.TIMED_OUT, timed_out=True)
    assert call_line(late).endswith("nobody answered in time")
