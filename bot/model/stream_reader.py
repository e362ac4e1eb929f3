"""Reading one streamed answer: a bound on silence, the answer put together, and which tool inputs arrived whole.

The events are the API's own JSON objects as the SDK's raw stream decodes them (`AsyncStream[object]`):
no typed event models are built, because the turn loop needs only the finished blocks, the text as it
comes, the stop reason and the usage. The SDK's event iterator already drops SSE `ping` events, so
bounding the wait for its next item bounds the wait for real progress: a stream that only pings is as
stuck as a silent one.

A tool call's input streams as raw JSON, read once its block is closed. A block that was never closed
or whose JSON does not parse (the output limit, a dropped connection, a malformed answer) is named in
`incomplete()`: its input is left empty and the turn answers that call with an error instead of running
it, while the other calls of the answer still run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from bot.types import JSON, TextSink, Usage

_CALL_BLOCKS = frozenset({"tool_use", "server_tool_use"})
"""Blocks whose input streams as `input_json_delta`; only `tool_use` ones are run by the daemon."""


class StreamStalled(Exception):
    """No stream event (pings do not count) arrived within the idle bound."""


@dataclass(slots=True)
class ToolInputs:
    """The raw JSON each tool call block streams, parsed once, when its block closes."""

    _ids: dict[int, str] = field(default_factory=dict)
    _open: dict[int, list[str]] = field(default_factory=dict)
    """The JSON parts of blocks not closed yet."""
    _parsed: dict[int, JSON] = field(default_factory=dict)
    """The input of each closed block that streamed one: what its JSON says, an empty object if it does not parse."""
    _whole: set[int] = field(default_factory=set)
    """Closed blocks whose input parsed, or that streamed none (the block's own, empty, input stands)."""

    def start(self, index: int, block: dict[str, Any]) -> None:
        if block["type"] == "tool_use":
            self._ids[index] = block["id"]
        self._open[index] = []

    def add(self, index: int, partial_json: str) -> None:
        parts = self._open.get(index)
        if parts is not None:
            parts.append(partial_json)

    def close(self, index: int) -> None:
        parts = self._open.pop(index, None)
        if parts is None:
            return  # not a call block
        text = "".join(parts)
        if not text.strip():
            self._whole.add(index)  # no input deltas at all: the block's own (empty) input stands
            return
        try:
            self._parsed[index] = json.loads(text)
        except ValueError:
            self._parsed[index] = {}
        else:
            self._whole.add(index)

    def inputs(self) -> dict[int, JSON]:
        """The input of each call block that streamed one, as it goes back in the history: what its JSON
        says when it is whole, an empty object when it is not (`incomplete()` then refuses the call)."""
        cut_off: dict[int, JSON] = {index: {} for index, parts in self._open.items() if "".join(parts).strip()}
        return self._parsed | cut_off

    def incomplete(self) -> frozenset[str]:
        """Ids of tool_use blocks whose input was not streamed to the end, or does not parse."""
        return frozenset(call_id for index, call_id in self._ids.items() if index not in self._whole)


class _IdleWatch:
    """Expires `bound` once no event came for `idle_s`, with one timer for the whole stream instead of a
    timeout per event: an event only notes when it came, and the timer, when it fires, either finds the
    stream quiet that long or waits again until it could be."""

    def __init__(self, bound: asyncio.Timeout, idle_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._bound = bound
        self._idle_s = idle_s
        self.last = self._loop.time()
        self._timer = self._loop.call_at(self.last + idle_s, self._check)

    def _check(self) -> None:
        now, quiet_until = self._loop.time(), self.last + self._idle_s
        if now >= quiet_until:
            self._bound.reschedule(now)  # expires at once: the read waiting for the next event is cancelled
        else:
            self._timer = self._loop.call_at(quiet_until, self._check)

    def cancel(self) -> None:
        self._timer.cancel()


@dataclass(slots=True)
class StreamReader:
    """Consumes the raw events, passing text on and putting the answer together; knows whether it saw the end."""

    on_text: TextSink | None
    tool_inputs: ToolInputs = field(default_factory=ToolInputs)
    started: bool = False
    """The `message_start` event arrived."""
    finished: bool = False
    """The `message_stop` event arrived: the answer is whole."""
    produced: bool = False
    """Some content arrived, so repeating the request would repeat what people already saw."""
    first_content_at: float | None = None
    """`time.monotonic()` when the first content block started: the time to first token."""
    stop_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    _blocks: list[dict[str, Any]] = field(default_factory=list)

    async def read(self, events: AsyncIterator[Any], idle_s: float) -> None:
        """Read to the end; `StreamStalled` when `idle_s` passes without an event."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None) as bound:
                watch = _IdleWatch(bound, idle_s)
                try:
                    while True:
                        try:
                            event = await anext(events)
                        except StopAsyncIteration:
                            return
                        watch.last = loop.time()
                        self.see(event)
                finally:
                    watch.cancel()
        except TimeoutError:
            if bound.expired():
                raise StreamStalled from None
            raise

    def see(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "content_block_delta":
            self._delta(event["index"], event["delta"])
        elif kind == "content_block_start":
            self._start(event["index"], event["content_block"])
        elif kind == "content_block_stop":
            self.tool_inputs.close(event["index"])
        elif kind == "message_start":
            self.started = True
            self.usage = dict(event["message"].get("usage") or {})
        elif kind == "message_delta":
            self.stop_reason = event["delta"].get("stop_reason")
            # The delta's counts are cumulative totals; the ones it leaves out keep their message_start value.
            self.usage.update((k, v) for k, v in (event.get("usage") or {}).items() if v is not None)
        elif kind == "message_stop":
            self.finished = True

    def _start(self, index: int, block: dict[str, Any]) -> None:
        if not self.produced:
            self.first_content_at = time.monotonic()
        self.produced = True
        block = {k: v for k, v in block.items() if v is not None}
        if block["type"] in _CALL_BLOCKS:
            self.tool_inputs.start(index, block)
        self._blocks.append(block)

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        kind = delta["type"]
        block = self._blocks[index]
        if kind == "text_delta":
            if block["type"] == "text":
                block["text"] += delta["text"]
                if self.on_text is not None and delta["text"]:
                    self.on_text(delta["text"])
        elif kind == "input_json_delta":
            self.tool_inputs.add(index, delta["partial_json"])
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif kind == "signature_delta":
            block["signature"] = delta["signature"]
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta["citation"])

    def content(self) -> list[dict[str, JSON]]:
        """The answer's blocks as they go back in the history; empty text blocks, which the API refuses there,
        left out."""
        for index, value in self.tool_inputs.inputs().items():
            self._blocks[index]["input"] = value
        return [block for block in self._blocks if block["type"] != "text" or block["text"]]

    def counted(self) -> Usage:
        usage = self.usage
        return Usage(
            input_tokens=usage.get("input_tokens") or 0,
            output_tokens=usage.get("output_tokens") or 0,
            cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
            cache_write_tokens=usage.get("cache_creation_input_tokens") or 0,
        )
