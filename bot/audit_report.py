"""`threadbot audit`: every tool call, who asked for it, what allowed it, what it ran with and how it ended.

Read from the calls the store keeps (retention deletes them with their session). `--json`
prints one object per line, for a log pipeline or `jq`; the table is for a person.
"""

from __future__ import annotations

import json

from bot.calls.summary import call_label, one_line
from bot.clock import utcnow
from bot.config import Settings
from bot.store import open_store
from bot.toolcall import ToolCall
from bot.usage_report import parse_since

HEADERS = ("at", "call", "tool", "requester", "decision", "decided by", "outcome")
DECIDED_BY_MAX_CHARS = 60


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
                call.outcome,
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
            print(json.dumps(call.audit_view(), ensure_ascii=False, default=str))
    else:
        print(render(calls))
    return 0
