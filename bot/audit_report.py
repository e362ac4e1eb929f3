"""`threadbot audit`: every tool call, who asked for it, what allowed it, what it ran with and how it ended.

Read from the calls the store keeps (retention deletes them with their session). `--json`
prints one object per line, for a log pipeline or `jq`; the table is for a person.
"""

from __future__ import annotations

import json
from typing import Any

from bot.calls.summary import call_label, one_line
from bot.clock import utcnow
from bot.config import Settings
from bot.store import open_store
from bot.toolcall import CallStatus, ToolCall
from bot.usage_report import parse_since

HEADERS = ("at", "call", "tool", "requester", "decision", "decided by", "outcome")
DECIDED_BY_MAX_CHARS = 60


def audit_record(call: ToolCall) -> dict[str, Any]:
    """The JSON shape of one call in the trail."""
    return {
        "call_id": call.id,
        "session": call.session_key,
        "tool": call.tool_name,
        "arguments": call.input,
        "requester": call.requester,
        "decision": call.decision.value,
        "decided_by": call.decided_by,
        "approvers": call.approvers,
        "outcome": outcome(call),
        "error": call.error,
        "at": call.created_at.isoformat(),
        "completed_at": call.completed_at.isoformat() if call.completed_at else None,
    }


def outcome(call: ToolCall) -> str:
    if call.status is CallStatus.FAILED and call.timed_out:
        return "timed_out"
    return "awaiting_approval" if call.awaiting_approval else call.status.value


def render(calls: list[ToolCall]) -> str:
    lines = [list(HEADERS)]
    for call in calls:
        lines.append(
            [
                call.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                call.id,
                call_label(call),
                call.requester or "-",
                call.decision.value,
                one_line(call.decided_by or "-", DECIDED_BY_MAX_CHARS),
                outcome(call),
            ]
        )
    widths = [max(len(cell) for cell in column) for column in zip(*lines, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in lines
    )


async def audit_report(settings: Settings, *, since: str, user: str | None, tool: str | None, as_json: bool) -> int:
    """Print the trail, oldest first; 2 for a bad argument."""
    try:
        start = parse_since(since, utcnow())
    except ValueError as exc:
        print(f"threadbot audit: {exc}")
        return 2
    store = await open_store(settings)
    try:
        calls = await store.audit_calls(since=start, requester=user, tool=tool)
    finally:
        await store.close()
    if as_json:
        for call in calls:
            print(json.dumps(audit_record(call), ensure_ascii=False, default=str))
    else:
        print(render(calls))
    return 0
