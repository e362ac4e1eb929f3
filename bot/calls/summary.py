"""How a call is shown to people, in plain text: its icon, its label, its state. One wording for every edge.

The console and Slack both build on these functions, so a call reads the same in each.
They stay edge-neutral: plain text, with two hooks an
edge passes to fit its medium, `who` (how a user id reads: a Slack mention) and `text`
(how free text from tools and errors is made safe: mrkdwn escaping).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

from bot.clock import utcnow
from bot.toolcall import JSON, CallStatus, Decision, ProgressKind, ToolCall

ARG_PREVIEW_CHARS = 40
"""One argument's value, shortened: the label names the call, it does not reproduce its input."""
ARGS_MAX_CHARS = 80
DETAIL_MAX_CHARS = 200

ICONS = {
    CallStatus.PENDING: "⏸️",
    CallStatus.RUNNING: "⏳",
    CallStatus.COMPLETED: "✅",
    CallStatus.FAILED: "❌",
    CallStatus.CANCELLED: "🚫",
    CallStatus.ORPHANED: "👻",
}
TIMED_OUT_ICON = "⌛"
AWAITING_ICON = "✋"
QUESTION_ICON = "❓"

Show = Callable[[str], str]


def _as_is(value: str) -> str:
    return value


def one_line(text: str, limit: int) -> str:
    """Whitespace (newlines included) collapsed, cut with an ellipsis past `limit`: a status is one line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def icon(call: ToolCall) -> str:
    """A timeout is a failure, and a call waiting for an approver is pending, but both are worth telling apart."""
    if call.awaiting_answer:
        return QUESTION_ICON
    if call.awaiting_approval:
        return AWAITING_ICON
    return TIMED_OUT_ICON if call.timed_out else ICONS[call.status]


def call_label(call: ToolCall) -> str:
    """`sleep_for(seconds=30)`: the call as a person would write it (strings unquoted), short enough for one line."""
    parts = []
    for name, value in call.input.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{name}={one_line(shown, ARG_PREVIEW_CHARS)}")
    return f"{call.tool_name}({one_line(', '.join(parts), ARGS_MAX_CHARS)})"


def latest_progress(call: ToolCall) -> str | None:
    """The newest progress worth showing: a payload's `message`, a log line, or compact JSON; one line."""
    for entry in reversed(call.progress):
        if entry.kind is ProgressKind.STARTED:
            continue
        payload = entry.payload
        if isinstance(payload, dict) and (fraction := _fraction(payload)) is not None:
            message = payload.get("message")
            text = f"{fraction} · {message}" if isinstance(message, str) and message else fraction
        elif isinstance(payload, dict) and isinstance(payload.get("message"), str):
            text = payload["message"]
        elif isinstance(payload, str):
            text = payload
        else:
            text = json.dumps(payload, ensure_ascii=False)
        return one_line(text, DETAIL_MAX_CHARS) or None
    return None


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _fraction(payload: dict[str, JSON]) -> str | None:
    """`3/10` from structured progress `{progress: 3, total: 10}` (`3` without a total); None without one."""
    done, total = payload.get("progress"), payload.get("total")
    if isinstance(done, bool) or not isinstance(done, int | float):
        return None
    if isinstance(total, int | float) and not isinstance(total, bool):
        return f"{_number(done)}/{_number(total)}"
    return _number(done)


def _took(word: str, seconds: float | None) -> str:
    return f" {word} {seconds:.1f}s" if seconds is not None else ""


def arguments_text(call: ToolCall) -> str:
    """Exactly what a call will run with, for the person asked to approve it: a command as it is, else JSON."""
    command = call.input.get("command") if call.tool_name == "run_command" else None
    return command if isinstance(command, str) else json.dumps(call.input, ensure_ascii=False, indent=2)


def state_text(call: ToolCall, *, now: datetime | None = None, who: Show = _as_is, text: Show = _as_is) -> str:
    """`running 12s · slept 12s of 30s`, `done in 30.0s`, `cancelled by U1`…, without the icon.

    A running call's time is counted to `now` (default: the real now), so a redrawn status ticks.
    A call that needed an approval says who decided; a question, who answered.
    """
    people = " or ".join(who(person) for person in call.approvers)
    if call.awaiting_answer:
        return f"waiting for an answer from {people or 'the person who asked'}"
    if call.awaiting_approval:
        return f"waiting for approval by {people or 'an approver'}"
    line = _state(call, now, who, text)
    if call.decision is Decision.APPROVED:
        return f"{line} · approved by {who(call.decided_by or 'someone')}"
    if call.decision is Decision.ANSWERED and call.status is CallStatus.COMPLETED:
        answer = call.result.get("answer") if isinstance(call.result, dict) else None
        said = f": {text(one_line(answer, DETAIL_MAX_CHARS))}" if isinstance(answer, str) else ""
        return f"answered by {who(call.decided_by or 'someone')}{said}"
    if call.decision is Decision.TIMED_OUT and call.is_question:
        return "nobody answered in time"
    return line


def _state(call: ToolCall, now: datetime | None, who: Show, text: Show) -> str:
    status = call.status
    if call.decision is Decision.DENIED and status is CallStatus.FAILED and call.decided_by:
        # Only a call that asked has approvers: any other was denied by the policy, not by a person.
        return f"denied by {who(call.decided_by)}" if call.approvers else "refused by the tool policy"
    if status is CallStatus.PENDING:
        detail = latest_progress(call)  # a cap that holds it back says which
        return f"pending ({text(detail)})" if detail else "pending (waiting for a free slot)"
    if status is CallStatus.RUNNING:
        started = call.started_at or call.created_at
        # Whole seconds gone, never rounded up: a tool counts its own progress from (just after) the same
        # start, so "running 4s · slept 4s of 12s" agrees where rounding would show "running 5s" half the time.
        running = f"running {int(max(0.0, ((now or utcnow()) - started).total_seconds()))}s"
        detail = latest_progress(call)
        return f"{running} · {text(detail)}" if detail else running
    if status is CallStatus.COMPLETED:
        return f"done{_took('in', call.elapsed_s)}"
    if status is CallStatus.CANCELLED:
        return f"cancelled by {who(call.cancelled_by)}" if call.cancelled_by else "cancelled"
    if status is CallStatus.ORPHANED:
        return "orphaned (the bot restarted while it ran)"
    if call.timed_out:
        return f"timed out{_took('after', call.elapsed_s)}"
    return f"failed: {text(one_line(call.error or 'unknown error', DETAIL_MAX_CHARS))}"
