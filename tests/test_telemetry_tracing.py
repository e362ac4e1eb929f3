"""Tracing: off (and free) without an endpoint, spans over OTLP/HTTP with one, nesting through asyncio tasks and
queued operations, a `traceparent` that round-trips between processes, and the engine's three kinds of span."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from fakes.otlp import FakeOtlp

from bot.telemetry import tracing
from bot.telemetry.agent import AgentTelemetry
from bot.telemetry.metrics import Metrics
from bot.telemetry.tracing import OFF, Tracing, resumed, traceparent
from bot.types import Billing, ModelReply, ModelRequest, Usage

WAIT_S = 20.0  # an upper bound: generous, so a loaded machine is slow, not failing


@pytest_asyncio.fixture
async def otlp(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeOtlp]:
    async with FakeOtlp() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        yield receiver


async def test_without_an_endpoint_tracing_is_off_and_spans_are_one_shared_no_op() -> None:
    off = Tracing.from_environ()
    assert not off.enabled and not off.capture_content
    with off.span("anything", {"a": 1}) as span:
        assert span is OFF
        assert traceparent() is None

    async def work() -> None:
        pass

    assert off.bind(work) is work, "a queued operation is handed back untouched"
    await off.close()


def test_an_endpoint_without_the_sdk_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setitem(sys.modules, "bot.telemetry.export", None)  # as if the otel extra were not installed
    with caplog.at_level(logging.WARNING, logger=tracing.__name__):
        assert not Tracing.from_environ().enabled
    assert "pip install 'threadbot[otel]'" in caplog.text


def test_the_sdk_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not Tracing.from_environ().enabled


async def test_spans_nest_through_tasks_and_queued_operations_and_reach_the_receiver(otlp: FakeOtlp) -> None:
    traced = Tracing.from_environ()
    assert traced.enabled
    queue: asyncio.Queue[object] = asyncio.Queue()

    async def post() -> None:
        with traced.span("post", kind="client"):
            pass

    async def worker() -> None:  # started outside any span, like a session's post queue
        operation = await queue.get()
        await operation()  # type: ignore[operator]

    running = asyncio.create_task(worker())
    with traced.span("event", {"slack.event.id": "Ev1"}, kind="consumer"):

        async def child() -> None:
            with traced.span("turn"):
                queue.put_nowait(traced.bind(post))

        await asyncio.create_task(child())
    await running
    with pytest.raises(ValueError), traced.span("broken"):
        raise ValueError("boom")
    await traced.close()

    spans = await otlp.wait_for(lambda: len(otlp.spans) == 4 and otlp.spans, WAIT_S, "four spans")
    by_name = {span.name: span for span in spans}
    event, turn, posted = by_name["event"], by_name["turn"], by_name["post"]
    assert (event.kind, event.parent_id, event.attributes) == ("consumer", "", {"slack.event.id": "Ev1"})
    assert turn.parent_id == event.span_id
    assert (posted.parent_id, posted.kind) == (turn.span_id, "client"), "the queued post is the turn's child"
    assert by_name["broken"].status == 2 and by_name["broken"].attributes["error.type"] == "ValueError"
    assert event.resource["service.name"] == "threadbot"


async def test_a_traceparent_carries_the_trace_to_another_process(otlp: FakeOtlp) -> None:
    sender, receiver = Tracing.from_environ(), Tracing.from_environ()
    with sender.span("offer"):
        header = traceparent()
    assert header is not None and header.startswith("00-")
    with resumed(header), receiver.span("run"):
        pass
    with resumed("not-a-traceparent"), receiver.span("alone"):
        pass
    await sender.close()
    await receiver.close()
    spans = await otlp.wait_for(lambda: len(otlp.spans) == 3 and otlp.spans, WAIT_S, "three spans")
    by_name = {span.name: span for span in spans}
    assert by_name["run"].trace_id == by_name["offer"].trace_id
    assert by_name["run"].parent_id == by_name["offer"].span_id
    assert by_name["alone"].parent_id == "" and by_name["alone"].trace_id != by_name["offer"].trace_id


async def test_the_engine_reports_a_turn_a_request_and_a_tool_as_spans_and_histograms(otlp: FakeOtlp) -> None:
    metrics = Metrics()
    telemetry = AgentTelemetry(metrics, Tracing.from_environ())
    request = ModelRequest("system words", [{"role": "user", "content": "secret words"}], [], billing=None)
    reply = ModelReply(
        [{"type": "text", "text": "hi"}], "end_turn", usage=Usage(10, 5, 100, 20), model="m1", first_token_s=0.3
    )
    with telemetry.turn("slack:T:C:1"):
        with telemetry.model_request("m1", request) as asked:
            assert "threadbot_model_requests_running 1.0" in metrics.render()
            asked.answered(reply)
        assert "threadbot_turns_running 1.0" in metrics.render()
        with telemetry.tool_call("now", "toolu_1", {}) as run:
            run.returned({"now": "secret result"})
    await telemetry.tracing.close()

    spans = await otlp.wait_for(lambda: len(otlp.spans) == 3 and otlp.spans, WAIT_S, "three spans")
    by_name = {span.name: span for span in spans}
    chat = by_name["chat m1"].attributes
    assert chat["gen_ai.usage.input_tokens"] == 130, "the convention counts cached input in input_tokens"
    assert (chat["gen_ai.usage.cache_read.input_tokens"], chat["gen_ai.usage.output_tokens"]) == (100, 5)
    assert (
        "gen_ai.input.messages" not in chat and "gen_ai.tool.call.result" not in by_name["execute_tool now"].attributes
    )
    text = metrics.render()
    assert "threadbot_turns_running 0.0" in text and "threadbot_model_requests_running 0.0" in text
    assert "threadbot_turn_duration_seconds_count 1.0" in text
    assert 'threadbot_model_request_seconds_count{model="m1"} 1.0' in text
    assert 'threadbot_model_first_token_seconds_sum{model="m1"} 0.3' in text
    assert 'threadbot_tool_call_seconds_count{tool="now"} 1.0' in text


async def test_contents_are_recorded_only_with_the_conventions_opt_in(
    otlp: FakeOtlp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    telemetry = AgentTelemetry(tracing=Tracing.from_environ())
    request = ModelRequest("sys", [{"role": "user", "content": "secret words"}], [], billing=Billing("k", "t", "U1"))
    with telemetry.model_request("m1", request) as asked:
        asked.answered(ModelReply([{"type": "text", "text": "an answer"}], "end_turn", model="m1"))
    with telemetry.tool_call("wordcount", "toolu_2", {"text": "a b"}) as run:
        run.returned({"words": 2})
    await telemetry.tracing.close()
    spans = await otlp.wait_for(lambda: len(otlp.spans) == 2 and otlp.spans, WAIT_S, "two spans")
    chat, tool = (span.attributes for span in sorted(spans, key=lambda span: span.name))
    assert "secret words" in chat["gen_ai.input.messages"] and "an answer" in chat["gen_ai.output.messages"]
    assert chat["gen_ai.conversation.id"] == "k"
    assert (tool["gen_ai.tool.call.arguments"], tool["gen_ai.tool.call.result"]) == ('{"text": "a b"}', '{"words": 2}')
