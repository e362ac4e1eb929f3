"""Prompt caching, checked against the fake's cache: it reports reads only for byte-equal prefixes."""

from __future__ import annotations

from typing import Any

from conftest import CoreFactory
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use, without_cache_markers

from bot.model.caching import mark_messages, system_blocks

KEY = "console:cache"


def cached_fraction(usages: list[dict[str, int]]) -> float:
    read = sum(u["cache_read_input_tokens"] for u in usages)
    total = sum(u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] for u in usages)
    return read / total


def breakpoints(body: dict[str, Any]) -> int:
    text = str(body)
    return text.count("'cache_control'")


async def test_a_ten_step_turn_reads_most_of_its_input_from_cache(
    fake: FakeAnthropic, core_factory: CoreFactory
) -> None:
    fake.cache.min_tokens = 256
    core = await core_factory()
    fake.script(
        *(Reply.tools(tool_use("wordcount", {"text": f"step {i} " * 40})) for i in range(9)),
        Reply.text_only("all counted"),
    )
    outcome = await core.engine.run_turn(KEY, "count words ten times " + "please " * 200)
    assert outcome is not None and outcome.text == "all counted" and outcome.iterations == 10
    assert len(fake.usages) == 10 and not fake.rejections
    assert fake.usages[0]["cache_read_input_tokens"] == 0 and fake.usages[0]["cache_creation_input_tokens"] > 0
    assert cached_fraction(fake.usages[1:]) >= 0.8
    assert all(breakpoints(body) <= 4 for body in fake.raw_requests)
    # The turn's total is the sum of its calls, as the fake reported them.
    assert outcome.usage.cache_read_tokens == sum(u["cache_read_input_tokens"] for u in fake.usages)


async def test_a_follow_up_reply_reads_the_earlier_history_from_cache(
    fake: FakeAnthropic, core_factory: CoreFactory
) -> None:
    fake.cache.min_tokens = 256
    core = await core_factory()
    fake.script(Reply.tools(tool_use("now", {})), Reply.text_only("it is late " * 50), Reply.text_only("sure"))
    await core.engine.run_turn(KEY, "what time is it? " * 100)
    earlier = fake.usages[-1]
    await core.engine.run_turn(KEY, "thanks")
    follow_up = fake.usages[-1]
    # Everything the previous request sent is read back; only the answer and the new reply are new.
    assert (
        follow_up["cache_read_input_tokens"]
        >= earlier["cache_read_input_tokens"] + earlier["cache_creation_input_tokens"]
    )
    assert follow_up["input_tokens"] < follow_up["cache_read_input_tokens"] / 4


async def test_the_cached_prefix_is_byte_stable(fake: FakeAnthropic, core_factory: CoreFactory) -> None:
    core = await core_factory()
    await core.engine.run_turn(KEY, "one")
    await core.engine.run_turn(KEY, "two")
    first, second = fake.raw_requests
    assert first["system"] == second["system"] and first["tools"] == second["tools"]
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
    # The first request's last block is marked again, at the same place, in the next one.
    assert second["messages"][0] == first["messages"][0]


async def test_caching_off_sends_no_markers(fake: FakeAnthropic, core_factory: CoreFactory) -> None:
    core = await core_factory(bot_prompt_cache="off")
    await core.engine.run_turn(KEY, "hello")
    await core.engine.run_turn(KEY, "again")
    assert all(breakpoints(body) == 0 for body in fake.raw_requests)
    assert all(u["cache_read_input_tokens"] == 0 for u in fake.usages)


def test_markers_go_on_copies_at_most_three_places() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": [{"type": "text", "text": "b"}]},
        {"role": "user", "content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}]},
    ]
    before = repr(messages)
    marked = mark_messages(messages, "1h")
    assert repr(messages) == before  # the history itself is never marked
    assert marked[0]["content"] == [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    assert marked[1] is messages[1]
    assert marked[2]["content"][0] == {"type": "text", "text": "c"}
    assert "cache_control" in marked[2]["content"][1]
    assert without_cache_markers(marked)[1:] == messages[1:]
    assert system_blocks("", "5m") == [] and mark_messages(messages, None) is messages
