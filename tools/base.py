"""What a tool is, and what it may touch while it runs.

A tool is a frozen `Tool` built by the `tool()` factory: name, description, JSON
input schema and a run function, sync or async. Async tools are cancelled with
`CancelledError`; sync tools run in a worker thread and must watch
`ctx.cancelled`, a `threading.Event`, since a thread cannot be interrupted.

Each tool also says what kind of work it does (`ToolKind`), because the caps
differ: a call that only awaits I/O costs a coroutine, while a thread or a
subprocess costs the machine.

A tool may hand a file to the people in the session with `ctx.share_file`. The
sink it goes to is taken from `FILE_SINK` when the context is built: the turn
sets it, and asyncio copies it into every task the turn starts, so the file
reaches the edge of the session that made the call without the call registry
having to know about files.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import tzinfo
from enum import StrEnum
from pathlib import Path
from typing import Any

JSON = Any
ProgressSink = Callable[[str, JSON], None]
RunFunction = Callable[[dict[str, JSON], "ToolContext"], Awaitable[JSON] | JSON]


class ToolKind(StrEnum):
    """What a call occupies while it runs; the registry caps `io` calls apart from the other two."""

    IO = "io"
    """Awaits I/O in the event loop (a sleep, a remote call, an MCP request): cheap to have many of."""
    THREAD = "thread"
    """Runs in a worker thread; every sync tool is one."""
    PROCESS = "process"
    """Starts subprocesses, or does work whose cost is unknown: the cautious default for async tools."""


class ToolError(Exception):
    """A failure the tool explains itself; its message is shown to the model as the call's error."""


async def _untracked(pgid: int) -> None:
    """A context outside the registry (a test, a script) has nowhere to record groups."""


@dataclass(frozen=True, slots=True)
class SharedFile:
    """A file a tool hands to the people in the session: Slack uploads it in the thread, the console saves it."""

    name: str
    content: bytes
    mimetype: str = "application/octet-stream"


@dataclass(frozen=True, slots=True)
class Answer:
    """A person's answer to a question the call asked (`ask_user`), given before the call runs."""

    text: str
    by: str


FileSink = Callable[[SharedFile], None]
FILE_SINK: ContextVar[FileSink | None] = ContextVar("threadbot_file_sink", default=None)
"""Where `ToolContext.share_file` sends files in the current turn; None where no edge takes them."""


@dataclass(slots=True)
class ToolContext:
    """Handed to each run: who is calling, where to report progress, how to notice a cancel."""

    call_id: str
    session_key: str
    work_dir: Path
    report: ProgressSink
    loop: asyncio.AbstractEventLoop
    cancelled: threading.Event = field(default_factory=threading.Event)
    loop_thread: int = field(default_factory=threading.get_ident)
    zone: tzinfo | None = None
    """The operator's time zone (BOT_TIMEZONE); None means the host's."""
    track_process_group: Callable[[int], Awaitable[None]] = _untracked
    """Await it with the id of each process group the tool starts: the daemon records it with the call,
    so a start after a crash can kill what is left of it."""
    share: FileSink | None = field(default_factory=FILE_SINK.get)
    answer: Answer | None = None
    """For a call that asked a person a question: what they answered (the registry waited for it)."""

    def progress(self, payload: JSON, kind: str = "partial") -> None:
        """Record structured progress; safe to call from the event loop or from a tool's thread."""
        if threading.get_ident() == self.loop_thread:
            self.report(kind, payload)
        else:
            self.loop.call_soon_threadsafe(self.report, kind, payload)

    def log(self, line: str) -> None:
        self.progress(line, kind="log")

    def share_file(self, name: str, content: bytes, mimetype: str = "application/octet-stream") -> None:
        """Hand a file to the people in the session; safe from a tool's thread. A ToolError where none can be."""
        if self.share is None:
            raise ToolError("files cannot be shared from here (no conversation to share them in)")
        shared = SharedFile(name, content, mimetype)
        if threading.get_ident() == self.loop_thread:
            self.share(shared)
        else:
            self.loop.call_soon_threadsafe(self.share, shared)


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, JSON]
    run: RunFunction
    timeout_s: float | None = None
    uses_slot: bool = True
    quick: bool = False
    kind: ToolKind = ToolKind.PROCESS
    read_only: bool = False
    """Changes nothing outside the bot (an MCP server's `readOnlyHint`): the built-in policy runs it unasked."""

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.run)

    async def invoke(self, args: dict[str, JSON], ctx: ToolContext) -> JSON:
        """Run it: an async tool in the caller's task, a sync one in a worker thread."""
        if self.is_async:
            return await self.run(args, ctx)
        return await asyncio.to_thread(self.run, args, ctx)

    def spec(self) -> dict[str, JSON]:
        """The tool as the Messages API expects it in `tools`."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


def tool(
    name: str,
    description: str,
    properties: dict[str, JSON] | None = None,
    *,
    required: tuple[str, ...] = (),
    timeout_s: float | None = None,
    uses_slot: bool = True,
    quick: bool = False,
    kind: ToolKind | None = None,
) -> Callable[[RunFunction], Tool]:
    """Declare a tool around its run function: `@tool("now", "Current time.")`.

    `uses_slot=False` keeps a call out of the concurrency caps (system tools must
    work while every slot is busy); `quick=True` promises it finishes at once, so
    a caller that never waits for background work may still wait for it. `kind`
    defaults to `thread` for a sync function and to `process` for an async one; an
    async tool that only awaits I/O declares `ToolKind.IO` to escape the tight cap.
    """
    schema: dict[str, JSON] = {"type": "object", "properties": properties or {}, "additionalProperties": False}
    if required:
        schema["required"] = list(required)

    def wrap(run: RunFunction) -> Tool:
        is_async = inspect.iscoroutinefunction(run)
        if not is_async and kind is ToolKind.IO:
            raise ValueError(f"tool {name!r}: a sync function always runs in a thread, it cannot be {kind}")
        resolved = kind or (ToolKind.PROCESS if is_async else ToolKind.THREAD)
        return Tool(
            name, description, schema, run, timeout_s=timeout_s, uses_slot=uses_slot, quick=quick, kind=resolved
        )

    return wrap


BLOCKS_KEY = "tool_result_blocks"
"""The one key of a result that reaches the model as content blocks rather than as one text."""


def blocks_result(blocks: list[dict[str, JSON]]) -> dict[str, JSON]:
    """A result made of Messages API content blocks (text, image), e.g. a screenshot with a caption.

    It stays plain JSON, so it is stored and reloaded like any other result.
    """
    return {BLOCKS_KEY: blocks}


def result_blocks(result: JSON) -> list[dict[str, JSON]] | None:
    """The content blocks of a `blocks_result`, or None for an ordinary result."""
    if isinstance(result, dict) and set(result) == {BLOCKS_KEY} and isinstance(result[BLOCKS_KEY], list):
        blocks: list[dict[str, JSON]] = result[BLOCKS_KEY]
        return blocks
    return None


def blocks_as_text(blocks: list[dict[str, JSON]]) -> str:
    """A block result where only text fits (a note, a status): its texts, and a mention of each image."""
    parts = []
    for block in blocks:
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            parts.append(f"[{block.get('type', 'content')} block]")
    return "\n".join(parts)
