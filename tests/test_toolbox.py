"""The toolbox: fixed tools, and sources whose tools change while the daemon runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.agent.toolbox import Toolbox
from tools.base import Tool, ToolContext, tool
from tools.now import now


def number_tool(name: str, kind: str) -> Tool:
    @tool(name, f"Takes a {kind}.", {"value": {"type": kind}}, required=("value",))
    async def run(args: dict[str, Any], ctx: ToolContext) -> Any:
        return args["value"]

    return run


class Source:
    def __init__(self, *tools: Tool) -> None:
        self.current = list(tools)

    def tools(self) -> Sequence[Tool]:
        return self.current


def test_a_sources_tools_are_seen_as_they_change_and_fixed_tools_win() -> None:
    source = Source(number_tool("mcp__a__x", "integer"), number_tool("now", "string"))
    box = Toolbox([now], [source])
    assert box.names == ["now", "mcp__a__x"]
    assert box.get("now") is now
    assert box.problem("mcp__a__x", {"value": 1}) is None
    source.current = [number_tool("mcp__a__x", "string"), number_tool("mcp__a__y", "integer")]
    assert [spec["name"] for spec in box.specs()] == ["now", "mcp__a__x", "mcp__a__y"]
    problem = box.problem("mcp__a__x", {"value": 1})
    assert problem == "invalid arguments for mcp__a__x: 1 is not of type 'string' (at value)"
    source.current = []
    assert box.get("mcp__a__y") is None
    assert (box.problem("mcp__a__y", {}) or "").startswith("unknown tool 'mcp__a__y'")
