"""One configured MCP server, kept connected: started in the background, restarted with backoff.

A supervisor task owns the SDK `Client` (anyio wants a context entered and left in
one task): it connects, lists the tools, and then waits for the connection to end
(the transport ran dry, the change subscription dropped, or a call found it
closed). Then it restarts the server after a backoff. Meanwhile the last known
tools stay offered and answer "server unavailable", and calls that were running
fail with the reason, since the SDK wakes them with "connection closed".

A call is cancelled by cancelling its task: the SDK then sends
`notifications/cancelled` (stdio) or aborts the request (HTTP), so the server's
handler is cancelled too, not only our wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import MessageHandlerFnT
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from bot.concurrency import backoff_s
from bot.mcp.config import McpServerConfig
from bot.mcp.config import Transport as Kind
from bot.mcp.results import convert_result
from bot.mcp.transport import StderrLog, open_transport
from tools.base import JSON, ToolContext, ToolError

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
STABLE_AFTER_S = 30.0
"""A connection that lived this long resets the backoff: the next crash is news, not a crash loop."""
MAX_TOOL_PAGES = 100
_LOST_ERRORS = (httpx2.HTTPError, OSError, EOFError)


def describe_failure(config: McpServerConfig, exc: BaseException) -> str:
    """Why a server could not be reached, in the words an operator needs."""
    if isinstance(exc, FileNotFoundError) and config.transport is Kind.STDIO:
        return f"command not found: {config.command}"
    if isinstance(exc, PermissionError) and config.transport is Kind.STDIO:
        return f"command not executable: {config.command}"
    if isinstance(exc, TimeoutError):
        return f"no answer to the handshake within {config.startup_timeout_s:g}s"
    if isinstance(exc, MCPError):
        return f"handshake failed: {exc.message}"
    if isinstance(exc, httpx2.HTTPError):
        return f"cannot reach {config.url}: {exc}"
    if isinstance(exc, BaseExceptionGroup):
        return describe_failure(config, exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}"


class McpConnection:
    """One MCP server as the toolbox sees it: its tools are always there, answering or saying why not.

    A server may start slowly, crash or drop its connection at any time; keeping that here (restart,
    backoff, the last known tools) lets a turn call an MCP tool like any other and get an error
    result, never a hang or a missing tool."""

    def __init__(self, config: McpServerConfig, *, on_tools_changed: Callable[[], None]) -> None:
        self.config = config
        self.tools: list[types.Tool] = []
        """The last listing the server gave (filtered by the operator's allow/deny lists)."""
        self.reason = "still starting"
        self._on_tools_changed = on_tools_changed
        self._client: Client | None = None
        self._lost = asyncio.Event()
        self._refreshing: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        """Set while connected; tests and `threadbot check` wait on it."""
        self.down = asyncio.Event()
        """Set once an attempt to connect failed or the connection ended, until the next one is ready."""

    @property
    def name(self) -> str:
        return self.config.name

    def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.name}")

    async def close(self) -> None:
        """Close the session; a stdio server's process group is stopped by the SDK (stdin closed, then killed)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- calls ----------------------------------------------------------------------------

    async def call(self, tool: str, args: dict[str, JSON], ctx: ToolContext) -> JSON:
        client = self._client
        if client is None:
            raise ToolError(f"MCP server {self.name!r} is unavailable ({self.reason}); try again later")

        async def report(progress: float, total: float | None, message: str | None) -> None:
            payload: dict[str, JSON] = {"progress": progress}
            if total is not None:
                payload["total"] = total
            if message:
                payload["message"] = message
            ctx.progress(payload)

        try:
            result = await client.call_tool(tool, args, progress_callback=report)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                self._connection_lost("the connection closed during a call")
                raise ToolError(f"MCP server {self.name!r} stopped during the call; it is being restarted") from None
            raise ToolError(f"MCP server {self.name!r}: {exc.message}") from None
        except _LOST_ERRORS as exc:
            self._connection_lost(f"{type(exc).__name__}: {exc}")
            raise ToolError(f"MCP server {self.name!r} could not be reached: {exc}") from None
        return convert_result(result)

    # -- the supervisor -------------------------------------------------------------------

    async def _supervise(self) -> None:
        loop = asyncio.get_running_loop()
        stderr = StderrLog(self.name) if self.config.transport is Kind.STDIO else None
        if stderr is not None:
            await stderr.start()
        failures = 0
        try:
            while True:
                began = loop.time()
                try:
                    await self._connected_session(stderr)
                    reason = self.reason
                except Exception as exc:
                    reason = describe_failure(self.config, exc)
                self._client = None
                self.ready.clear()
                self.reason = reason
                self.down.set()
                failures = 1 if loop.time() - began >= STABLE_AFTER_S else failures + 1
                delay_s = backoff_s(failures, first_s=FIRST_BACKOFF_S, max_s=MAX_BACKOFF_S)
                log.warning("MCP server %r unavailable: %s; restarting in %.1fs", self.name, reason, delay_s)
                await asyncio.sleep(delay_s)  # the restart backoff itself, not a wait for a condition
        finally:
            self._client = None
            self.ready.clear()
            self.reason = "the daemon is shutting down"
            if stderr is not None:
                await stderr.close()

    async def _connected_session(self, stderr: StderrLog | None) -> None:
        """One life of the connection: connect, list, serve calls until it ends."""
        self._lost = asyncio.Event()
        async with connected_client(self.config, self._lost, stderr, self._on_message) as client:
            async with asyncio.timeout(self.config.startup_timeout_s):
                self.tools = await list_tools(client, self.config)
            self._on_tools_changed()
            listening = None
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                listening = asyncio.create_task(self._listen(client), name=f"mcp-listen:{self.name}")
            self._client = client
            self.reason = "the connection closed"
            self.down.clear()
            self.ready.set()
            log.info("MCP server %r ready: %d tools (protocol %s)", self.name, len(self.tools), client.protocol_version)
            try:
                await self._lost.wait()
            finally:
                self._client = None
                self.ready.clear()
                for task in (listening, self._refreshing):
                    if task is not None:
                        await _cancel_and_wait(task)

    def _connection_lost(self, reason: str) -> None:
        if not self._lost.is_set():
            self.reason = reason
            self._lost.set()

    # -- the tool list --------------------------------------------------------------------

    async def _on_message(self, message: Any) -> None:
        """`tools/list_changed`: refetch now, so the next model request sees the new list."""
        if isinstance(message, types.ToolListChangedNotification) and self._client is not None:
            if self._refreshing is None or self._refreshing.done():
                self._refreshing = asyncio.create_task(self._refresh(self._client), name=f"mcp-refresh:{self.name}")
        elif isinstance(message, Exception):
            log.warning("MCP server %r sent something unreadable: %s", self.name, message)

    async def _refresh(self, client: Client) -> None:
        try:
            self.tools = await list_tools(client, self.config)
            self._on_tools_changed()
            log.info("MCP server %r changed its tools: now %d", self.name, len(self.tools))
        except (MCPError, *_LOST_ERRORS) as exc:
            log.warning("MCP server %r: refreshing its tools failed: %s", self.name, exc)

    async def _listen(self, client: Client) -> None:
        """Keep a 2026 `subscriptions/listen` stream open: it carries list changes, and its drop is news."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    pass  # the SDK hands each event to `_on_message` as a notification too
        except SubscriptionLost:
            self._connection_lost("the server's event stream dropped")
        except (MCPError, *_LOST_ERRORS, RuntimeError) as exc:
            log.info("MCP server %r offers no change subscription (%s)", self.name, exc)


@contextlib.asynccontextmanager
async def connected_client(
    config: McpServerConfig,
    lost: asyncio.Event,
    stderr: StderrLog | None,
    on_message: MessageHandlerFnT | None = None,
) -> AsyncIterator[Client]:
    """A client past the handshake (bounded by the server's startup timeout); `lost` is set when the link ends."""
    transport = open_transport(config, lost, stderr.writer if stderr else None)
    async with contextlib.AsyncExitStack() as stack:
        # No response cache: tools are listed at connect and on change only, and must then be fresh.
        client = Client(transport, message_handler=on_message, mode="auto", cache=None)
        async with asyncio.timeout(config.startup_timeout_s):
            await stack.enter_async_context(client)
        yield client


async def list_tools(client: Client, config: McpServerConfig) -> list[types.Tool]:
    """Every page of the server's tools, minus those the operator did not allow."""
    listed: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        listed.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return [item for item in listed if config.offers(item.name)]


async def _cancel_and_wait(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
