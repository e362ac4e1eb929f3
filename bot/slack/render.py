"""What the Slack edge shows, as pure functions: tool-call status lines, Block Kit, answer messages.

Nothing here does I/O or keeps state, so every message the bot can post is built
(and unit-tested) from a value. Answers go out in Slack's `markdown` block, which
renders the model's Markdown itself: no home-made Markdown→mrkdwn regexes.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from bot.calls.models import CallStatus, ProgressKind, ToolCall, utcnow
from bot.slack.split import close_open_fence

Block = dict[str, Any]

CANCEL_ACTION = "cancel_call"
MAX_CALL_BLOCKS = 49
"""A message holds 50 blocks; one is kept for the "and N more" line."""
ARGS_MAX_CHARS = 80
DETAIL_MAX_CHARS = 200
SECTION_MAX_CHARS = 3_000

_USER_ID = re.compile(r"[UW][A-Z0-9]+")


def escape(text: str) -> str:
    """Escape the three characters mrkdwn treats as markup (`&`, `<`, `>`)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def who(by: str | None) -> str:
    """A Slack user id as a mention, anything else ("model: reason", "shutdown") as escaped text."""
    if not by:
        return "someone"
    return f"<@{by}>" if _USER_ID.fullmatch(by) else escape(by)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def call_signature(call: ToolCall) -> str:
    """`sleep_for(seconds=30)`: the tool and its arguments, short enough for one line."""
    parts = [f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in call.input.items()]
    args = _one_line(", ".join(parts), ARGS_MAX_CHARS)
    return f"{call.tool_name}({args})".replace("`", "'")


def progress_detail(call: ToolCall) -> str | None:
    """The newest progress worth showing: a payload's `message`, a log line, or compact JSON."""
    for entry in reversed(call.progress):
        if entry.kind is ProgressKind.STARTED:
            continue
        payload = entry.payload
        if isinstance(payload, dict) and isinstance(payload.get("message"), str):
            text = payload["message"]
        elif isinstance(payload, str):
            text = payload
        else:
            text = json.dumps(payload, ensure_ascii=False)
        return _one_line(text, DETAIL_MAX_CHARS) or None
    return None


def _seconds(value: float | None) -> str:
    return f"{value:.1f}s" if value is not None else "?"


def call_state(call: ToolCall, now: datetime | None = None) -> str:
    """The part after the dash: `running 12s · slept 12s of 30s`, `done in 30.0s`, `cancelled by <@U1>`…"""
    status = call.status
    if status is CallStatus.PENDING:
        return "pending (waiting for a free slot)"
    if status is CallStatus.RUNNING:
        started = call.started_at or call.created_at
        running = f"running {max(0.0, ((now or utcnow()) - started).total_seconds()):.0f}s"
        detail = progress_detail(call)
        return f"{running} · {escape(detail)}" if detail else running
    if status is CallStatus.COMPLETED:
        return f"done in {_seconds(call.elapsed_s)}"
    if status is CallStatus.CANCELLED:
        return f"cancelled by {who(call.cancelled_by)}" if call.cancelled_by else "cancelled"
    if status is CallStatus.ORPHANED:
        return "orphaned (the bot restarted while it ran)"
    if call.timed_out:
        return f"timed out after {_seconds(call.elapsed_s)}"
    return f"failed: {escape(_one_line(call.error or 'unknown error', DETAIL_MAX_CHARS))}"


_ICONS = {
    CallStatus.PENDING: "⏸️",
    CallStatus.RUNNING: "⏳",
    CallStatus.COMPLETED: "✅",
    CallStatus.CANCELLED: "🚫",
    CallStatus.ORPHANED: "👻",
}


def call_line(call: ToolCall, now: datetime | None = None) -> str:
    """One call as a line of mrkdwn: icon, signature, state."""
    icon = "⌛" if call.timed_out else _ICONS.get(call.status, "❌")
    return f"{icon} `{escape(call_signature(call))}` — {call_state(call, now)}"


def status_message(calls: list[ToolCall], now: datetime | None = None) -> tuple[str, list[Block]]:
    """A tool batch's status message: fallback text, and a section per call with a Cancel button while open."""
    lines = [call_line(call, now) for call in calls]
    blocks: list[Block] = []
    for call, line in zip(calls[:MAX_CALL_BLOCKS], lines, strict=False):
        block: Block = {
            "type": "section",
            "block_id": f"call:{call.id}"[:255],
            "text": {"type": "mrkdwn", "text": line[:SECTION_MAX_CHARS]},
        }
        if not call.is_final:
            block["accessory"] = {
                "type": "button",
                "action_id": CANCEL_ACTION,
                "value": call.id,
                "style": "danger",
                "text": {"type": "plain_text", "text": "Cancel"},
            }
        blocks.append(block)
    if len(calls) > MAX_CALL_BLOCKS:
        more = len(calls) - MAX_CALL_BLOCKS
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"…and {more} more calls"}]})
    return "\n".join(lines)[:SECTION_MAX_CHARS], blocks


def answer_message(chunk: str, *, streaming: bool = False) -> tuple[str, list[Block]]:
    """One message of the model's answer: the Markdown in a `markdown` block, and the raw text as fallback.

    While streaming, a code fence still open is closed for display, so half an answer renders cleanly.
    """
    shown = close_open_fence(chunk) if streaming else chunk
    return shown, [{"type": "markdown", "text": shown}]


def reminder_text(text: str, requester: str | None) -> str:
    return f"<@{requester}> ⏰ {text}" if requester else f"⏰ {text}"
