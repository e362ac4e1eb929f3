"""Reading one streamed answer: a bound on silence, and which tool inputs arrived whole.

The SDK's event iterator already drops SSE `ping` events, so bounding the wait for
its next item bounds the wait for real progress: a stream that only pings is as
stuck as a silent one. The SDK also parses tool input in partial mode, so a JSON
object cut off mid-way (the output limit, a dropped connection) reads as a smaller,
valid-looking object; only the raw deltas and the block's stop event tell whether
the model finished writing it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from bot.types import TextSink


class StreamStalled(Exception):
    """No stream event (pings do not count) arrived within the idle bound."""


@dataclass(slots=True)
class ToolInputs:
    """The raw JSON each tool_use block streamed, and whether its block was closed."""

    _ids: dict[int, str] = field(default_factory=dict)
    _json: dict[int, str] = field(default_factory=dict)
    _closed: set[int] = field(default_factory=set)

    def see(self, event: Any) -> None:
        kind = event.type
        if kind == "content_block_start" and event.content_block.type == "tool_use":
            self._ids[event.index] = event.content_block.id
            self._json[event.index] = ""
        elif kind == "content_block_delta" and event.delta.type == "input_json_delta" and event.index in self._json:
            self._json[event.index] += event.delta.partial_json
        elif kind == "content_block_stop":
            self._closed.add(event.index)

    def incomplete(self) -> frozenset[str]:
        """Ids of tool_use blocks whose input was not streamed to the end."""
        return frozenset(
            call_id
            for index, call_id in self._ids.items()
            if index not in self._closed or not _is_whole_json(self._json[index])
        )


def _is_whole_json(text: str) -> bool:
    if not text.strip():
        return True  # no input deltas at all: the block's own (empty) input stands
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@dataclass(slots=True)
class StreamReader:
    """Consumes the SDK's events, passing text on and noting tool inputs; knows whether it saw the end."""

    on_text: TextSink | None
    tool_inputs: ToolInputs = field(default_factory=ToolInputs)
    started: bool = False
    """The `message_start` event arrived: the SDK holds a message snapshot."""
    finished: bool = False
    """The `message_stop` event arrived: the answer is whole."""
    produced: bool = False
    """Some content arrived, so repeating the request would repeat what people already saw."""
    first_content_at: float | None = None
    """`time.monotonic()` when the first content block started: the time to first token."""

    async def read(self, events: AsyncIterator[Any], idle_s: float) -> None:
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

    def _see(self, event: Any) -> None:
        self.tool_inputs.see(event)
        if event.type == "message_start":
            self.started = True
        elif event.type == "content_block_start":
            if not self.produced:
                self.first_content_at = time.monotonic()
            self.produced = True
        elif event.type == "text" and self.on_text is not None and event.text:
            self.on_text(event.text)
        elif event.type == "message_stop":
            self.finished = True
