"""How one MCP server is reached: the SDK's stdio or streamable HTTP transport, watched for its end.

The SDK's session notices a closed connection only when a request is waiting on
it; we want to know at once, to restart the server. So the transport's read
stream is wrapped: its end of stream sets an event. A stdio server's stderr goes
through a pipe into our log, one record per line, under the server's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any, TextIO

import httpx2
from mcp.client._transport import Transport, TransportStreams
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from bot.mcp.config import McpServerConfig
from bot.mcp.config import Transport as Kind

log = logging.getLogger("bot.mcp.server")


class _WatchedRead:
    """The transport's read stream, setting `ended` when it runs dry (EOF, or closed under us)."""

    def __init__(self, inner: Any, ended: asyncio.Event) -> None:
        self._inner = inner
        self._ended = ended

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except Exception:
            self._ended.set()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except Exception:  # StopAsyncIteration included: the end of the stream
            self._ended.set()
            raise

    async def __aenter__(self) -> _WatchedRead:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        self._ended.set()
        result: bool | None = await self._inner.__aexit__(*exc)
        return result


@contextlib.asynccontextmanager
async def watched(transport: Transport, ended: asyncio.Event) -> AsyncIterator[TransportStreams]:
    async with transport as (read, write):
        yield _WatchedRead(read, ended), write


class StderrLog:
    """A pipe whose write end a stdio server gets as stderr; each line it writes is logged as ours.

    One pipe serves every restart of the server, so it is opened once and closed at the end.
    """

    def __init__(self, server: str) -> None:
        self._server = server
        read_fd, write_fd = os.pipe()
        self.writer: TextIO = os.fdopen(write_fd, "w")
        self._read_fd = read_fd
        self._transport: asyncio.ReadTransport | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        stream = asyncio.StreamReader()
        self._transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(self._read_fd, "rb")
        )
        self._task = asyncio.create_task(self._pump(stream), name=f"mcp-stderr:{self._server}")

    async def _pump(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            text = line.decode("utf-8", errors="replace").rstrip()
            if text:
                log.info("[%s] %s", self._server, text)

    async def close(self) -> None:
        self.writer.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._transport is not None:
            self._transport.close()  # closes the read end too
        else:
            os.close(self._read_fd)


@contextlib.asynccontextmanager
async def open_transport(
    config: McpServerConfig, ended: asyncio.Event, stderr: TextIO | None
) -> AsyncIterator[TransportStreams]:
    """The server's streams: a child process (in its own process group, stderr to `stderr`) or an HTTP endpoint."""
    if config.transport is Kind.STDIO:
        if stderr is None:
            raise ValueError("a stdio server needs somewhere to write its stderr")
        params = StdioServerParameters(
            command=config.command,
            args=list(config.args),
            env=dict(config.env) if config.env else None,
            cwd=config.cwd,
        )
        async with watched(stdio_client(params, errlog=stderr), ended) as streams:
            yield streams
        return
    http: httpx2.AsyncClient = create_mcp_http_client(headers=dict(config.headers) if config.headers else None)
    async with http, watched(streamable_http_client(config.url, http_client=http), ended) as streams:
        yield streams
