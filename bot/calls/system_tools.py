"""The system tools over the registry: inspect, list, await and cancel this session's calls.

Each acts only on the calling session's calls; another session's id is reported
exactly like an unknown one, so nothing leaks across threads. These tools answer in
the daemon's own words, but a call's result, error and progress they quote are that
call's tool's output, and are fenced as its own result would be.
"""

from __future__ import annotations

from typing import Any

from bot.agent.fence import OWN_TOOLS, tool_output
from bot.agent.protocol import render_result
from bot.calls.registry import CallRegistry
from bot.toolcall import JSON, ToolCall
from tools.base import Tool, ToolContext, ToolError, tool


def quoted_view(call: ToolCall, *, include_progress: bool) -> dict[str, JSON]:
    """`call.status_view` as another tool quotes it: its result, error and progress payloads fenced as its
    tool's output (plain for the daemon's own tools), so text from outside cannot pass for ours here."""
    view = call.status_view(include_progress=include_progress)
    if call.tool_name in OWN_TOOLS:
        return view
    for name in ("result", "error"):
        if view.get(name) is not None:
            view[name] = tool_output(call.tool_name, render_result(view[name]))
    for entry in view.get("progress") or []:
        assert isinstance(entry, dict)
        entry["payload"] = tool_output(call.tool_name, render_result(entry["payload"]))
    return view


def system_tools(registry: CallRegistry, *, wait_max_s: float) -> list[Tool]:
    """Build the three system tools bound to `registry`; they take no concurrency slot."""

    @tool(
        "get_tool_call_status",
        "Status, progress and (once final) result of a tool call of this conversation. With "
        "wait_for_completion it waits up to timeout_seconds for the call to finish.",
        {
            "tool_call_id": {"type": "string", "minLength": 1},
            "include_progress": {"type": "boolean", "default": True},
            "wait_for_completion": {"type": "boolean", "default": False},
            "timeout_seconds": {"type": "number", "exclusiveMinimum": 0},
        },
        required=("tool_call_id",),
        uses_slot=False,
        quick=True,
    )
    async def get_tool_call_status(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        call_id = args["tool_call_id"]
        call = await registry.find(call_id, session_key=ctx.session_key)
        if call is None or call_id == ctx.call_id:
            raise ToolError(f"no tool call {call_id!r} in this conversation")
        if args.get("wait_for_completion") and not call.is_final:
            await registry.wait_final(call_id, min(float(args.get("timeout_seconds", 30)), wait_max_s))
        if call.is_final and not call.delivered:
            await registry.mark_delivered([call])
        return quoted_view(call, include_progress=bool(args.get("include_progress", True)))

    @tool(
        "list_running_tool_calls",
        "Tool calls of this conversation that are not final yet (pending or running).",
        uses_slot=False,
    )
    async def list_running_tool_calls(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        calls = [call for call in registry.open_calls(ctx.session_key) if call.id != ctx.call_id]
        return {
            "tool_calls": [
                {**call.status_view(include_progress=False), "input": call.input, "elapsed_s": call.elapsed_s}
                for call in sorted(calls, key=lambda c: c.created_at)
            ]
        }

    @tool(
        "cancel_tool_call",
        "Cancel a pending or running tool call of this conversation (best effort). "
        "cancelled is false when the call had already finished.",
        {"tool_call_id": {"type": "string", "minLength": 1}, "reason": {"type": "string"}},
        required=("tool_call_id",),
        uses_slot=False,
        quick=True,
    )
    async def cancel_tool_call(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        call_id = args["tool_call_id"]
        if call_id == ctx.call_id:
            raise ToolError("a call cannot cancel itself")
        reason = args.get("reason")
        outcome = await registry.cancel(
            call_id, session_key=ctx.session_key, by=f"model: {reason}" if reason else "model"
        )
        if outcome is None:
            raise ToolError(f"no tool call {call_id!r} in this conversation")
        return outcome.to_json()

    return [get_tool_call_status, list_running_tool_calls, cancel_tool_call]
