"""The MCP servers as one source of tools for the toolbox.

Each server's tools become ordinary `Tool`s whose async run function calls the
server, so every MCP call goes through the call registry like any other (lifecycle,
caps, status line, cancel, timeouts, late delivery). The list is rebuilt whenever
a server (re)lists its tools; the toolbox reads it at every model request. Order
is deterministic (servers in the file's order, tools by name), so the tool list the
model sees does not change from one request to the next without a reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from types import TracebackType

import mcp_types as types
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from bot.mcp.config import McpServerConfig
from bot.mcp.connection import McpConnection
from bot.mcp.naming import model_tool_names
from tools.base import JSON, Tool, ToolContext, ToolKind

log = logging.getLogger(__name__)


class McpTools:
    """Starts every enabled server on enter (without waiting for any), stops them all on exit."""

    def __init__(self, configs: Iterable[McpServerConfig], *, reserved: Iterable[str] = ()) -> None:
        self._reserved = frozenset(reserved)
        self.connections = [
            McpConnection(config, on_tools_changed=self._rebuild) for config in configs if config.enabled
        ]
        self._tools: list[Tool] = []
        self.rebuilt = asyncio.Event()
        """Set each time a server's tools were (re)listed."""

    def tools(self) -> Sequence[Tool]:
        return self._tools

    async def __aenter__(self) -> McpTools:
        for connection in self.connections:
            connection.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # At once: a stdio server that ignores its closed stdin gets a grace period before it is killed.
        results = await asyncio.gather(*(c.close() for c in self.connections), return_exceptions=True)
        for connection, result in zip(self.connections, results, strict=True):
            if isinstance(result, Exception):
                log.warning("MCP server %r did not close cleanly: %s", connection.name, result)

    def _rebuild(self) -> None:
        tools: list[Tool] = []
        taken = set(self._reserved)
        for connection in self.connections:
            names = model_tool_names(connection.name, (item.name for item in connection.tools), taken)
            built = [_as_tool(connection, item, names[item.name]) for item in connection.tools]
            server_tools = sorted((item for item in built if item is not None), key=lambda item: item.name)
            taken.update(item.name for item in server_tools)
            tools.extend(server_tools)
        self._tools = tools
        self.rebuilt.set()


def _as_tool(connection: McpConnection, listed: types.Tool, name: str) -> Tool | None:
    schema: dict[str, JSON] = dict(listed.input_schema)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        log.warning(
            "MCP server %r: tool %r has an invalid input schema (%s); not offered",
            connection.name,
            listed.name,
            exc.message,
        )
        return None
    if schema.get("type") != "object":
        log.warning("MCP server %r: tool %r does not take an object; not offered", connection.name, listed.name)
        return None
    tool_name = listed.name

    async def run(args: dict[str, JSON], ctx: ToolContext) -> JSON:
        return await connection.call(tool_name, args, ctx)

    description = listed.description or listed.title or f"The {tool_name!r} tool"
    return Tool(
        name,
        f"{description}\n(MCP server {connection.name!r}, tool {tool_name!r})",
        schema,
        run,
        timeout_s=connection.config.timeout_s,
        kind=ToolKind.IO,  # a remote request: it waits on the server, not on this machine
        read_only=bool(listed.annotations and listed.annotations.read_only_hint),
    )
