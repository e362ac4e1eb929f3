"""Plain-text one-liners about a call, shared by every edge that shows calls to people."""

from __future__ import annotations

import json

from bot.calls.models import CallStatus, ToolCall

ARG_PREVIEW_CHARS = 40


def call_label(call: ToolCall) -> str:
    """`sleep_for(seconds=30)`: the call as a person would write it, long arguments shortened."""
    parts = []
    for name, value in call.input.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(shown) > ARG_PREVIEW_CHARS:
            shown = shown[: ARG_PREVIEW_CHARS - 1] + "…"
        parts.append(f"{name}={shown}")
    return f"{call.tool_name}({', '.join(parts)})"


def latest_progress(call: ToolCall) -> str | None:
    """The newest progress entry as text: a payload's `message` if it has one, else the payload itself."""
    for entry in reversed(call.progress):
        if entry.kind.value == "started":
            continue
        payload = entry.payload
        if isinstance(payload, dict):
            return str(payload.get("message") or json.dumps(payload, ensure_ascii=False))
        return str(payload)
    return None


def state_text(call: ToolCall) -> str:
    """`running 12s · slept 12s of 30s`, `done in 30.0s`, `failed: …` and so on, without icons."""
    elapsed = call.elapsed_s
    if call.status is CallStatus.PENDING:
        return "waiting for a free slot"
    if call.status is CallStatus.RUNNING:
        progress = latest_progress(call)
        running = f"running {elapsed:.0f}s" if elapsed is not None else "running"
        return f"{running} · {progress}" if progress else running
    if call.status is CallStatus.COMPLETED:
        return f"done in {elapsed:.1f}s" if elapsed is not None else "done"
    if call.status is CallStatus.CANCELLED:
        return f"cancelled by {call.cancelled_by}" if call.cancelled_by else "cancelled"
    if call.status is CallStatus.ORPHANED:
        return "orphaned"
    return "timed out" if call.timed_out else f"failed: {call.error}"
