"""Traces from the daemon as a process: a turn's spans reach an OTLP/HTTP receiver, from the Slack event to the
posted answer, named and attributed as the GenAI conventions say, without contents unless the operator opts in.

The receiver (tests/fakes/otlp.py) decodes the protobuf the real exporter sends; the daemon finds it through
the SDK's own `OTEL_EXPORTER_OTLP_ENDPOINT`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from cluster_rig import cluster
from daemon_rig import WAIT_S, World, mention, wait_text
from fakes.anthropic_api import Reply, tool_use
from fakes.otlp import FakeOtlp, ReceivedSpan

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]

MODEL = "claude-sonnet-5-5"  # the daemon's default BOT_MODEL


@pytest_asyncio.fixture(loop_scope="module")
async def otlp() -> AsyncIterator[FakeOtlp]:
    async with FakeOtlp() as receiver:
        yield receiver


def _traced(world: World, otlp: FakeOtlp, **env: str) -> None:
    # A short export delay: the spans of a finished turn leave within a tenth of a second, not the default 5 s.
    world.daemon.env.update(OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url, OTEL_BSP_SCHEDULE_DELAY="50", **env)


async def _one_tool_turn(world: World, otlp: FakeOtlp, words: str) -> tuple[dict[str, str], list[ReceivedSpan]]:
    """A mention whose turn calls `wordcount` once, then answers; returns the event and that trace's spans."""
    world.script.add(
        words,
        Reply.tools(tool_use("wordcount", {"text": "three little words"}, id="toolu_trace1"), text="Counting."),
        Reply.text_only("Three words."),
    )
    await world.daemon.start()
    await world.daemon.connected()
    event = await mention(world.slack, world.channel, words)
    await wait_text(world.slack, world.channel, event["ts"], "Three words.")

    def trace() -> list[ReceivedSpan] | None:
        [turn] = otlp.named("invoke_agent") or [None]
        if turn is None:
            return None
        spans = [span for span in otlp.spans if span.trace_id == turn.trace_id]
        names = [span.name for span in spans]
        done = names.count(f"chat {MODEL}") == 2 and "execute_tool wordcount" in names
        posted = any(span.attributes.get("slack.message.ts") for span in spans if span.name.endswith("postMessage"))
        return spans if done and posted else None

    return event, await otlp.wait_for(trace, WAIT_S, "the turn's trace with its answer posted")


async def test_a_turn_is_one_trace_from_the_slack_event_to_the_posted_answer(own: World, otlp: FakeOtlp) -> None:
    _traced(own, otlp)
    words = "count these for the trace"
    event, spans = await _one_tool_turn(own, otlp, words)
    by_name = {span.name: span for span in spans}
    handled = by_name["slack event"]
    turn = by_name["invoke_agent threadbot"]
    tool = by_name["execute_tool wordcount"]
    chats = [span for span in spans if span.name == f"chat {MODEL}"]

    assert handled.parent_id == "" and handled.kind == "consumer", "the event starts the trace"
    assert handled.attributes["slack.event.id"]
    assert handled.attributes["slack.event.type"] == "app_mention", "its message twin is dropped, in a trace of its own"
    assert turn.parent_id == handled.span_id
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.conversation.id"].endswith(event["ts"])
    assert all(chat.parent_id == turn.span_id and chat.kind == "client" for chat in chats)
    assert tool.parent_id == turn.span_id
    assert tool.attributes["gen_ai.tool.name"] == "wordcount"
    assert tool.attributes["gen_ai.tool.call.id"] == "toolu_trace1"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"

    usages = own.model.usages[-2:]
    for chat, usage in zip(chats, usages, strict=True):
        attributes = chat.attributes
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "anthropic"
        assert attributes["gen_ai.request.model"] == MODEL
        prompt = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
        assert attributes["gen_ai.usage.input_tokens"] == prompt
        assert attributes["gen_ai.usage.output_tokens"] == usage["output_tokens"]
        assert attributes["gen_ai.usage.cache_read.input_tokens"] == usage["cache_read_input_tokens"]
        assert attributes["gen_ai.usage.cache_creation.input_tokens"] == usage["cache_creation_input_tokens"]
    assert [chat.attributes["gen_ai.response.finish_reasons"] for chat in chats] == [["tool_use"], ["end_turn"]]

    posts = [span for span in spans if span.name == "slack chat.postMessage"]
    assert posts and all(post.kind == "client" for post in posts)
    assert {post.parent_id for post in posts} <= {span.span_id for span in spans}, "posts hang in the turn's tree"
    assert handled.resource["service.name"] == "threadbot"
    assert "Failed to detach context" not in own.daemon.log(), "every span's context was left where it was entered"

    # Contents stay out unless the operator opts in: no message, argument or result, and none of the words.
    for span in spans:
        assert not any(key.endswith(("messages", "arguments", "result", "instructions")) for key in span.attributes)
        assert not any(
            "three little words" in str(value) or words in str(value) for value in span.attributes.values()
        ), span.name


async def test_contents_go_into_spans_when_the_operator_opts_in(own: World, otlp: FakeOtlp) -> None:
    _traced(own, otlp, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
    words = "count these with contents"
    _, spans = await _one_tool_turn(own, otlp, words)
    tool = next(span for span in spans if span.name == "execute_tool wordcount")
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"text": "three little words"}'
    assert "3" in tool.attributes["gen_ai.tool.call.result"]
    first, second = (span for span in spans if span.name == f"chat {MODEL}")
    assert words in first.attributes["gen_ai.input.messages"]
    assert "Three words." in second.attributes["gen_ai.output.messages"]


@pytest.mark.cluster
@pytest.mark.timeout(180)  # it may wait for another test's cluster to end (cluster_rig.one_cluster_at_a_time)
async def test_the_trace_goes_with_the_thread_job_to_the_replica_that_runs_it(
    pg_dsn: str, tmp_path: Path, otlp: FakeOtlp
) -> None:
    async with cluster(pg_dsn, tmp_path) as rig:
        rig.script.add("traced across replicas", Reply.text_only("Answered by a replica."))
        await rig.start(2, OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url, OTEL_BSP_SCHEDULE_DELAY="50")
        event = await mention(rig.slack, "C1", "traced across replicas")
        await wait_text(rig.slack, "C1", event["ts"], "Answered by a replica.")
        [turn] = await otlp.wait_for(lambda: otlp.named("invoke_agent"), WAIT_S, "the turn's span")
        handled = next(span for span in otlp.named("slack event") if span.span_id == turn.parent_id)
        assert handled.trace_id == turn.trace_id
        [(carried,)] = await rig.query(
            "SELECT args->>'traceparent' FROM procrastinate_jobs WHERE args->>'session_key' LIKE %s", f"%{event['ts']}"
        )
        assert carried.startswith(f"00-{handled.trace_id}-{handled.span_id}-"), "the job row holds the event's span"
