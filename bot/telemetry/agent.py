"""What the engine reports: a turn, a model request, a tool call; each one span and one histogram.

The engine calls these three context managers and nothing else of telemetry, so the turn loop, the
registry and the model client each carry a line, not an instrumentation. Spans follow the OpenTelemetry
GenAI conventions: `invoke_agent` per turn, `chat {model}` per model request (with `gen_ai.usage.*`,
cache reads and writes included), `execute_tool {name}` per call (`gen_ai.tool.name`,
`gen_ai.tool.call.id`). Contents (messages, tool arguments and results) only with the operator's opt-in.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

from bot.telemetry.metrics import Metrics
from bot.telemetry.tracing import Span, Tracing
from bot.types import ModelReply, ModelRequest

AGENT = "threadbot"
PROVIDER = "anthropic"


class ModelCall:
    """The open `chat` span of one request; `answered` books what the reply says."""

    __slots__ = ("_capture", "_span", "first_token_s")

    def __init__(self, span: Span, capture: bool) -> None:
        self._span, self._capture = span, capture
        self.first_token_s: float | None = None

    def answered(self, reply: ModelReply) -> None:
        usage = reply.usage
        self.first_token_s = reply.first_token_s
        self._span.set(
            {
                "gen_ai.response.model": reply.model,
                "gen_ai.response.finish_reasons": [reply.stop_reason],
                # The convention counts cached input inside input_tokens; the API reports it apart.
                "gen_ai.usage.input_tokens": usage.prompt_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
            }
        )
        if self._capture:
            self._span.set({"gen_ai.output.messages": _json([{"role": "assistant", "content": reply.content}])})


class ToolRun:
    """The open `execute_tool` span of one call; `returned` adds the result when contents are captured."""

    __slots__ = ("_capture", "_span")

    def __init__(self, span: Span, capture: bool) -> None:
        self._span, self._capture = span, capture

    def returned(self, result: Any) -> None:
        if self._capture:
            self._span.set({"gen_ai.tool.call.result": _json(result)})


class AgentTelemetry:
    """One per `Metrics`: it adds the gauges of what runs now (`turns_running`, `model_requests_running`)."""

    def __init__(self, metrics: Metrics | None = None, tracing: Tracing | None = None) -> None:
        self.metrics = metrics or Metrics()
        self.tracing = tracing or Tracing()
        self.turns_running = 0
        self.requests_running = 0
        self.metrics.gauge("turns_running", "turns running now", lambda: self.turns_running)
        self.metrics.gauge(
            "model_requests_running", "model requests waiting for their answer", lambda: self.requests_running
        )

    @contextlib.contextmanager
    def turn(self, session_key: str) -> Iterator[None]:
        started = time.monotonic()
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT,
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.conversation.id": session_key,
        }
        self.turns_running += 1
        try:
            with self.tracing.span(f"invoke_agent {AGENT}", attributes):
                yield
        finally:
            self.turns_running -= 1
            self.metrics.observe("turn_duration_seconds", time.monotonic() - started)

    @contextlib.contextmanager
    def model_request(self, model: str, request: ModelRequest) -> Iterator[ModelCall]:
        started = time.monotonic()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": model,
        }
        if request.billing is not None:
            attributes["gen_ai.conversation.id"] = request.billing.session_key
        capture = self.tracing.capture_content
        if capture:
            attributes["gen_ai.system_instructions"] = _json([{"type": "text", "content": request.system}])
            attributes["gen_ai.input.messages"] = _json(request.messages)
        self.requests_running += 1
        with self.tracing.span(f"chat {model}", attributes, kind="client") as span:
            call = ModelCall(span, capture)
            try:
                yield call
            finally:
                self.requests_running -= 1
                self.metrics.observe("model_request_seconds", time.monotonic() - started, model)
                if call.first_token_s is not None:
                    self.metrics.observe("model_first_token_seconds", call.first_token_s, model)

    @contextlib.contextmanager
    def tool_call(self, tool_name: str, call_id: str, arguments: Any) -> Iterator[ToolRun]:
        started = time.monotonic()
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool_name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        }
        capture = self.tracing.capture_content
        if capture:
            attributes["gen_ai.tool.call.arguments"] = _json(arguments)
        try:
            with self.tracing.span(f"execute_tool {tool_name}", attributes) as span:
                yield ToolRun(span, capture)
        finally:
            self.metrics.observe("tool_call_seconds", time.monotonic() - started, tool_name)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
