"""Reading one streamed answer from its server-sent events: a bound on silence, and which tool inputs arrived whole.

The events are read as the API sends them (JSON per SSE `data:` line) and the message is put together
here, as plain data: the SDK's typed stream builds a pydantic object per event and rebuilds the whole
message snapshot on each, work the turn loop never looks at. SSE `ping` events are dropped before the
wait for the next event, so bounding that wait bounds the wait for real progress: a stream that only
pings is as stuck as a silent one. A tool input is parsed only once its block is closed; one cut off
mid-way (the output limit, a dropped connection) is named incomplete and left empty.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from bot.types import JSON, TextSink


class StreamStalled(Exception):
    """No stream event (pings do not count) arrived within the idle bound."""


class StreamError(Exception):
    """The API sent an `error` event mid-stream; `body` is its JSON (or its text)."""

    def __init__(self, message: str, body: object) -> None:
        super().__init__(message)
        self.body = body


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """The JSON of each server-sent event but pings; `StreamError` for an `error` event."""
    kind: str | None = None
    data: list[str] = []
    async for line in lines:
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif not line:
            text, event_kind = "\n".join(data), kind
            kind, data = None, []
            if event_kind in (None, "ping") or not text:
                continue
            if event_kind == "error":
                try:
                    body: object = json.loads(text)
                except ValueError:
                    body = text
                raise StreamError(f"{body}", body)
            yield json.loads(text)


@dataclass(slots=True)
class ToolInputs:
    """The raw JSON each tool_use block streamed, and whether its block was closed."""

    _ids: dict[int, str] = field(default_factory=dict)
    _json: dict[int, str] = field(default_factory=dict)
    _closed: set[int] = field(default_factory=set)
    unreadable: bool = False
    """A closed block's input is no JSON object: cut off by the output limit, or the model wrote none."""

    def start(self, index: int, call_id: str) -> None:
        self._ids[index] = call_id
        self._json[index] = ""

    def add(self, index: int, partial: str) -> None:
        if index in self._json:
            self._json[index] += partial

    def close(self, index: int) -> Any:
        """The block's input once it is closed; None if no deltas came, or what came is not whole JSON (cut off
        by the output limit: the block is closed, its input is not)."""
        text = self._json.get(index, "")
        if not text.strip():
            self._closed.add(index)
            return None
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):  # a tool's input is an object, as the SDK's parser insists
            self.unreadable = True
            return None
        self._closed.add(index)
        return parsed

    def incomplete(self) -> frozenset[str]:
        """Ids of tool_use blocks whose input was not streamed to the end."""
        return frozenset(call_id for index, call_id in self._ids.items() if index not in self._closed)


@dataclass(slots=True)
class StreamReader:
    """Consumes the events, passing text on, noting tool inputs and building the message; knows whether it saw
    the end."""

    on_text: TextSink | None
    tool_inputs: ToolInputs = field(default_factory=ToolInputs)
    message: dict[str, Any] = field(default_factory=dict)
    """The message so far, as the API's JSON: `message_start`'s, its blocks grown by their deltas."""
    started: bool = False
    """The `message_start` event arrived."""
    finished: bool = False
    """The `message_stop` event arrived: the answer is whole."""
    produced: bool = False
    """Some content arrived, so repeating the request would repeat what people already saw."""
    first_content_at: float | None = None
    """`time.monotonic()` when the first content block started: the time to first token."""

    async def read(self, events: AsyncIterator[dict[str, Any]], idle_s: float) -> None:
        """Read to the end; `StreamStalled` when `idle_s` passes without an event."""
        iterator = aiter(events)
        while True:
            try:
                async with asyncio.timeout(idle_s) as bound:
                    event = await anext(iterator)
            except StopAsyncIteration:
                return
            except TimeoutError:
                if bound.expired():
                    raise StreamStalled from None
                raise
            self._see(event)

    @property
    def content(self) -> list[dict[str, JSON]]:
        blocks: list[dict[str, JSON]] = self.message.get("content", [])
        return blocks

    def _see(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            self.started = True
            self.message = dict(event["message"])
            self.message["content"] = list(self.message.get("content") or [])
        elif kind == "content_block_start":
            if not self.produced:
                self.first_content_at = time.monotonic()
            self.produced = True
            block = dict(event["content_block"])
            if block.get("type") == "tool_use":
                self.tool_inputs.start(event["index"], block["id"])
            self.content.append(block)
        elif kind == "content_block_delta":
            self._delta(self.content[event["index"]], event["index"], event["delta"])
        elif kind == "content_block_stop":
            block = self.content[event["index"]]
            if block.get("type") == "tool_use":
                parsed = self.tool_inputs.close(event["index"])
                if parsed is not None:
                    block["input"] = parsed
        elif kind == "message_delta":
            self.message.update({k: v for k, v in event.get("delta", {}).items() if v is not None})
            usage = self.message.setdefault("usage", {})
            usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.finished = True

    def _delta(self, block: dict[str, Any], index: int, delta: dict[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
            if self.on_text is not None and delta["text"]:
                self.on_text(delta["text"])
        elif kind == "input_json_delta":
            self.tool_inputs.add(index, delta["partial_json"])
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif kind == "signature_delta":
            block["signature"] = delta["signature"]
        elif kind == "citations_delta":
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]
