"""Tests for the protocol-level Anthropic fake, driven by the real AsyncAnthropic client over loopback.

Why: every agent-loop test relies on this fake behaving like the real API on the wire, so its SSE shape,
retry behaviour and request validation are pinned here against the unmodified SDK.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest
from anthropic.types import MessageParam
from fakes.anthropic_api import (
    Failure,
    FakeAnthropic,
    Reply,
    tool_results,
    tool_use,
    user_texts,
    validate_request,
)

MODEL = "claude-test"
HELLO: list[MessageParam] = [{"role": "user", "content": "hello"}]


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@pytest.fixture
async def client(fake: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    sdk = anthropic.AsyncAnthropic(base_url=fake.url, api_key="test", max_retries=0)
    yield sdk
    await sdk.close()


def _tool_turn(use_id: str = "toolu_1") -> list[dict[str, Any]]:
    """A user turn followed by an assistant turn calling one tool."""
    call = {"type": "tool_use", "id": use_id, "name": "now", "input": {}}
    return [{"role": "user", "content": "what time is it?"}, {"role": "assistant", "content": [call]}]


async def test_text_reply_streams_in_chunks(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.script(Reply.text_only("Hello there, this reply arrives in pieces."))
    async with client.messages.stream(model=MODEL, max_tokens=100, messages=HELLO) as stream:
        chunks = [chunk async for chunk in stream.text_stream]
        final = await stream.get_final_message()
    assert len(chunks) > 1
    assert "".join(chunks) == "Hello there, this reply arrives in pieces."
    assert final.content[0].type == "text" and final.content[0].text == "".join(chunks)
    assert final.stop_reason == "end_turn" and final.model == MODEL and final.id.startswith("msg_")
    assert final.usage.output_tokens > 0
    assert fake.requests[0]["stream"] is True and fake.pending == 0


async def test_tool_use_input_arrives_as_json_deltas(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    args = {"seconds": 5, "label": "a longer label so the JSON splits"}
    fake.script(Reply.tools(tool_use("sleep_for", args, id="toolu_abc"), text="Sleeping now."))
    async with client.messages.stream(model=MODEL, max_tokens=100, messages=HELLO) as stream:
        partials = [e.partial_json async for e in stream if e.type == "input_json"]
        final = await stream.get_final_message()
    assert len(partials) >= 2
    assert [b.type for b in final.content] == ["text", "tool_use"]
    call = final.content[1]
    assert call.type == "tool_use" and call.id == "toolu_abc" and call.name == "sleep_for" and call.input == args
    assert final.stop_reason == "tool_use"


async def test_overloaded_then_success_is_retried_quickly(fake: FakeAnthropic) -> None:
    fake.script(Failure(529), Reply.text_only("recovered"))
    sdk = anthropic.AsyncAnthropic(base_url=fake.url, api_key="test", max_retries=2)
    try:
        async with sdk.messages.stream(model=MODEL, max_tokens=10, messages=HELLO) as stream:
            assert await stream.get_final_text() == "recovered"
    finally:
        await sdk.close()
    assert len(fake.requests) == 2 and len(fake.request_times) == 2
    # retry-after-ms (1 ms) beats the SDK's default backoff, at least 0.375 s for a first retry
    assert fake.request_times[1] - fake.request_times[0] < 0.3


async def test_failure_surfaces_as_status_error(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.script(Failure(429, "rate_limit_error", "slow down"))
    with pytest.raises(anthropic.RateLimitError) as info:
        await client.messages.create(model=MODEL, max_tokens=10, messages=HELLO)
    assert info.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
        "request_id": info.value.request_id,
    }


async def test_unpaired_tool_use_is_rejected(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    messages: Any = [*_tool_turn(), {"role": "user", "content": "never mind"}]
    with pytest.raises(anthropic.BadRequestError, match="toolu_1"):
        async with client.messages.stream(model=MODEL, max_tokens=10, messages=messages) as stream:
            await stream.get_final_message()
    assert len(fake.requests) == 1 and "without `tool_result`" in fake.rejections[0]


async def test_temperature_is_rejected(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.script(Reply.text_only("not consumed"))
    with pytest.raises(anthropic.BadRequestError, match="temperature"):
        await client.messages.create(model=MODEL, max_tokens=10, messages=HELLO, extra_body={"temperature": 0.2})
    assert fake.rejections and fake.pending == 1  # a rejected request does not eat scripted replies


async def test_non_streaming_and_dynamic_responder(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    async def echo(body: dict[str, Any]) -> Reply:
        return Reply.text_only("echo: " + user_texts(body)[-1])

    fake.script(echo)
    message = await client.messages.create(model=MODEL, max_tokens=10, messages=HELLO)
    assert message.content[0].type == "text" and message.content[0].text == "echo: hello"
    assert (await client.messages.create(model=MODEL, max_tokens=10, messages=HELLO)).stop_reason == "end_turn"


async def test_hold_pauses_mid_stream(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    hold = asyncio.Event()
    fake.script(Reply.text_only("first part, then the rest", hold=hold))
    async with client.messages.stream(model=MODEL, max_tokens=10, messages=HELLO) as stream:
        texts = stream.text_stream
        first = await anext(texts)
        pending = asyncio.ensure_future(anext(texts))
        await asyncio.sleep(0.05)  # give a wrongly non-held stream the chance to deliver more
        assert not pending.done()
        hold.set()
        rest = [await pending] + [chunk async for chunk in texts]
    assert first + "".join(rest) == "first part, then the rest"


async def test_wait_for_requests_times_out_helpfully(fake: FakeAnthropic) -> None:
    with pytest.raises(TimeoutError, match="for 1 request"):
        await fake.wait_for_requests(1, timeout=0.05)


async def test_wait_for_requests_wakes_on_arrival(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    waiter = asyncio.ensure_future(fake.wait_for_requests(1))
    await client.messages.create(model=MODEL, max_tokens=10, messages=HELLO)
    assert (await waiter)[0]["messages"] == HELLO


def test_validate_accepts_results_followed_by_text() -> None:
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12:00"}
    follow_up = {"role": "user", "content": [result, {"type": "text", "text": "also, hi"}]}
    body = {"model": MODEL, "max_tokens": 10, "messages": [*_tool_turn(), follow_up]}
    assert validate_request(body) is None
    assert tool_results(body) == {"toolu_1": "12:00"}
    assert user_texts(body) == ["what time is it?", "also, hi"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ([{"type": "text", "text": "hi"}, {"type": "tool_result", "tool_use_id": "toolu_1"}], "must come first"),
        ([{"type": "text", "text": "hi"}], "without `tool_result`"),
        ([{"type": "tool_result", "tool_use_id": "toolu_2"}], "unexpected `tool_use_id`"),
        ([{"type": "tool_result", "tool_use_id": "toolu_1"}] * 2, "exactly one"),
        ([{"type": "mystery"}], "unknown content block type"),
    ],
)
def test_validate_rejects_bad_pairing(content: list[dict[str, Any]], expected: str) -> None:
    body = {"model": MODEL, "max_tokens": 10, "messages": [*_tool_turn(), {"role": "user", "content": content}]}
    assert expected in (validate_request(body) or "")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"top_k": 5}, "top_k"),
        ({"max_tokens": None}, "max_tokens"),
        ({"messages": []}, "at least one"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "first message"),
        ({"messages": HELLO * 2}, "alternate"),
        ({"messages": _tool_turn()}, "without `tool_result`"),
        ({"tool_choice": {"type": "tool", "name": "nope"}, "tools": [{"name": "now"}]}, "not in `tools`"),
    ],
)
def test_validate_rejects_malformed_requests(change: dict[str, Any], expected: str) -> None:
    body = {"model": MODEL, "max_tokens": 10, "messages": HELLO, **change}
    body = {k: v for k, v in body.items() if v is not None}
    assert expected in (validate_request(body) or "")


async def test_cut_tool_input_ends_at_the_output_limit(fake: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    fake.script(Reply.cut_tool_input(tool_use("sleep_for", {"seconds": 10}), keep_chars=13))
    async with client.messages.stream(model=MODEL, max_tokens=10, messages=HELLO) as stream:
        raw = "".join([e.partial_json async for e in stream if e.type == "input_json"])
        final = await stream.get_final_message()
    assert raw == '{"seconds": 1' and final.stop_reason == "max_tokens"
    assert final.content[0].type == "tool_use" and final.content[0].input == {"seconds": 1}  # the SDK's partial parse


async def test_cut_tool_input_with_disconnect_drops_the_connection(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    fake.script(Reply.cut_tool_input(tool_use("sleep_for", {"seconds": 10}), keep_chars=13, disconnect=True))
    kinds: list[str] = []
    with pytest.raises(Exception, match="incomplete chunked read"):
        async with client.messages.stream(model=MODEL, max_tokens=10, messages=HELLO) as stream:
            kinds.extend([e.type async for e in stream])
    assert "content_block_stop" not in kinds and "message_stop" not in kinds


@pytest.mark.parametrize("how", ["silent", "pings"])
async def test_stalled_stream_hangs_after_the_first_delta(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic, how: str
) -> None:
    fake.script(Reply.stalled(how))  # type: ignore[arg-type]
    async with client.messages.stream(model=MODEL, max_tokens=10, messages=HELLO) as stream:
        texts = stream.text_stream
        assert await anext(texts) == "Let "
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await anext(texts)
    assert fake.stalls == 1


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
PDF = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (IMAGE, None),
        (PDF, None),
        ({**IMAGE, "source": {**IMAGE["source"], "media_type": "image/tiff"}}, "not supported for image"),
        ({**PDF, "source": {**PDF["source"], "media_type": "text/plain"}}, "not supported for document"),
        ({**IMAGE, "source": {**IMAGE["source"], "data": "not base64!"}}, "not valid base64"),
        ({**IMAGE, "source": {"type": "url", "url": "http://x"}}, "only base64"),
    ],
)
def test_validate_checks_image_and_document_sources(block: dict[str, Any], expected: str | None) -> None:
    body = {"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": [block]}]}
    problem = validate_request(body)
    assert problem is None if expected is None else expected in (problem or "")
