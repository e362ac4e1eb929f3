"""`AnthropicProvider` against the wire-level fake: what a reply carries, the SDK's retries, and the request body
written once for its fixed parts (`bot.model.request_body`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from conftest import MODEL
from fakes.anthropic_api import Failure, FakeAnthropic, Reply, text, tool_use

from bot.model import request_body
from bot.model.anthropic import AnthropicProvider
from bot.model.client import anthropic_client
from bot.model.request_body import RequestBody
from bot.types import JSON, ModelRequest

SYSTEM = "You are a bot. " * 400  # over the fake's 1,024 tokens a cached prefix needs
SCHEMA: dict[str, JSON] = {"type": "object", "properties": {"text": {"type": "string"}}}


Providers = Callable[..., AnthropicProvider]


@pytest.fixture
async def providers() -> AsyncIterator[Providers]:
    """Makes providers on the daemon's client (`make(fake, max_retries=0)`) and closes them all afterwards."""
    made: list[AnthropicProvider] = []

    def make(fake: FakeAnthropic, *, max_retries: int = 0) -> AnthropicProvider:
        client = anthropic_client(api_key="test-key", base_url=fake.url, max_retries=max_retries)
        made.append(AnthropicProvider(model=MODEL, max_tokens=512, client=client))
        return made[-1]

    yield make
    for provider in made:
        await provider.close()


def _tools() -> list[dict[str, JSON]]:
    """Fresh dicts around one schema object, as `Tool.spec()` makes them for each request."""
    return [{"name": "wordcount", "description": "Counts words.", "input_schema": SCHEMA}]


def _request(*messages: dict[str, Any]) -> ModelRequest:
    history = list(messages) or [{"role": "user", "content": "hi"}]
    return ModelRequest(system=SYSTEM, messages=history, tools=_tools())


@pytest.mark.parametrize(
    "stop_reason", ["end_turn", "max_tokens", "pause_turn", "refusal", "model_context_window_exceeded"]
)
async def test_the_stop_reason_and_the_usage_are_the_apis(
    fake: FakeAnthropic, providers: Providers, stop_reason: str
) -> None:
    fake.script(Reply([text("Partly.")], stop_reason))  # type: ignore[arg-type]
    reply = await providers(fake).complete(_request())
    assert reply.stop_reason == stop_reason and reply.content == [text("Partly.")]
    usage = fake.usages[-1]
    assert reply.usage.input_tokens == usage["input_tokens"] and reply.usage.output_tokens == usage["output_tokens"]
    assert reply.usage.cache_write_tokens == usage["cache_creation_input_tokens"] > 0


async def test_cache_reads_are_counted(fake: FakeAnthropic, providers: Providers) -> None:
    provider = providers(fake)
    first = await provider.complete(_request())
    second = await provider.complete(_request())
    assert first.usage.cache_write_tokens > 0 and first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens == first.usage.cache_write_tokens
    assert fake.usages[-1]["cache_read_input_tokens"] == second.usage.cache_read_tokens


async def test_text_arrives_as_it_streams_and_calls_whole(fake: FakeAnthropic, providers: Providers) -> None:
    call = tool_use("wordcount", {"text": "three short words"})
    fake.script(Reply.tools(call, text="Counting."))
    deltas: list[str] = []
    reply = await providers(fake).complete(_request(), on_text=deltas.append)
    assert "".join(deltas) == "Counting." and len(deltas) > 1
    assert reply.content == [text("Counting."), call] and reply.stop_reason == "tool_use"
    assert reply.incomplete_tool_ids == frozenset() and reply.first_token_s is not None


async def test_overloaded_answers_are_retried_by_the_sdk(fake: FakeAnthropic, providers: Providers) -> None:
    fake.script(Failure(529), Failure(429, "rate_limit_error", "slow down"), Reply.text_only("Finally."))
    reply = await providers(fake, max_retries=2).complete(_request())
    assert reply.text == "Finally." and len(fake.requests) == 3
    assert [h["x-stainless-retry-count"] for h in fake.request_headers] == ["0", "1", "2"]


async def test_the_body_is_what_the_sdk_would_send(fake: FakeAnthropic, providers: Providers) -> None:
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "and?"},
    ]
    await providers(fake).complete(_request(*history))
    sent = fake.raw_requests[-1]
    assert sent["model"] == MODEL and sent["max_tokens"] == 512 and sent["stream"] is True
    assert sent["system"] == [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    assert sent["tools"] == _tools()
    marked = {"type": "ephemeral"}
    assert sent["messages"][0]["content"] == [{"type": "text", "text": "hi", "cache_control": marked}]
    assert sent["messages"][1] == history[1]
    assert sent["messages"][2]["content"] == [{"type": "text", "text": "and?", "cache_control": marked}]
    headers = fake.request_headers[-1]
    assert "test-key" in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))
    assert headers["content-type"] == "application/json"
    assert "anthropic-version" in headers and fake.rejections == []


def test_fixed_parts_are_written_once_and_again_when_they_change(monkeypatch: pytest.MonkeyPatch) -> None:
    body = RequestBody(model=MODEL, cache_ttl=None)
    encoded: list[Any] = []
    encode = request_body._encode

    def counting(value: Any) -> str:
        encoded.append(value)
        return encode(value)

    monkeypatch.setattr(request_body, "_encode", counting)
    request = _request()
    first = body(request, 100)
    assert json.loads(first) == {
        "model": MODEL,
        "stream": True,
        "max_tokens": 100,
        "system": [{"type": "text", "text": SYSTEM}],
        "tools": _tools(),
        "messages": request.messages,
    }
    assert len(encoded) == 3  # the system blocks, the tools, the messages
    assert body(_request(), 100) == first  # fresh tool dicts around the same schema object
    assert len(encoded) == 4  # the messages alone
    described = [{**_tools()[0], "description": "New."}]
    assert json.loads(body(ModelRequest(SYSTEM, request.messages, described), 100))["tools"] == described
    schema = [{**_tools()[0], "input_schema": {"type": "object"}}]
    assert json.loads(body(ModelRequest(SYSTEM, request.messages, schema), 100))["tools"] == schema
    assert json.loads(body(ModelRequest("Other.", request.messages, _tools()), 100))["system"][0]["text"] == "Other."
