"""A thread that outgrows the context window keeps answering: stubs, summaries, truncation, restarts."""

from __future__ import annotations

import itertools
from typing import Any

from conftest import CoreFactory
from fakes.anthropic_api import FakeAnthropic, Outcome, Reply, text, tool_use, user_texts
from store_backends import message_archive

from bot.agent.context import (
    IMAGE_CHARS,
    STUB_PREFIX,
    SUMMARY_PREFIX,
    request_chars,
    stub_old_results,
    summary_cut,
    truncate_inputs,
)
from tools.base import ToolContext, tool

KEY = "console:long"
WINDOW = 20_000
BIG = "lorem ipsum dolor sit amet " * 200  # ≈ 5,400 characters, ≈ 1,350 of the fake's tokens


@tool("dump", "Returns a large text.", quick=True)
def dump(args: dict[str, Any], ctx: ToolContext) -> str:
    return BIG


def scripted(body: dict[str, Any]) -> Outcome:
    """A model that calls `dump` once per person's message, summarises when asked, and answers otherwise."""
    last = body["messages"][-1]
    texts = user_texts({"messages": [last]})
    if texts and texts[-1].startswith("Summarise the conversation above"):
        return Reply.text_only(f"summary of {len(body['messages'])} messages")
    if any(b.get("type") == "tool_result" for b in last["content"] if isinstance(b, dict)):
        return Reply.text_only("noted")
    return Reply.tools(tool_use("dump", {}))


def tool_pairs_hold(messages: list[dict[str, Any]]) -> bool:
    for previous, message in itertools.pairwise(messages):
        uses = [b["id"] for b in previous["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
        results = [
            b["tool_use_id"] for b in message["content"] if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        if uses != results:
            return False
    return True


async def test_a_thread_driven_far_past_the_window_keeps_answering(core_factory: CoreFactory) -> None:
    fake = FakeAnthropic(scripted, context_window=WINDOW, min_cacheable_tokens=256)
    async with fake:
        core_factory._fake = fake  # this test's own fake, with a context limit
        core = await core_factory(bot_context_window=WINDOW, bot_compact_at=0.75)
        core.toolbox.add(dump)
        for turn in range(200):
            outcome = await core.engine.run_turn(KEY, f"turn {turn}: fetch the text again")
            assert outcome is not None and outcome.error is None and outcome.text == "noted", turn
        assert fake.rejections == []  # never too long, and the pairing held at every request
        assert all(tool_pairs_hold(body["messages"]) for body in fake.requests)
        summaries = [b for b in fake.requests if user_texts(b)[-1].startswith("Summarise the conversation")]
        assert len(summaries) >= 3
        history = await core.store.load_messages(KEY)
        assert user_texts({"messages": history})[0].startswith(SUMMARY_PREFIX)
        # Everything ever said is still in the store, for audit.
        archive = await message_archive(core.store, KEY)
        assert sum("turn 0: fetch" in t for t in user_texts({"messages": archive})) == 1
        assert len(archive) > 800
        # Between compactions the prefix is stable: most input is read from the cache.
        read = sum(u["cache_read_input_tokens"] for u in fake.usages)
        sent = sum(
            u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] for u in fake.usages
        )
        assert read / sent > 0.5


async def test_the_summary_survives_a_restart(core_factory: CoreFactory, make_settings: Any) -> None:
    fake = FakeAnthropic(scripted, context_window=WINDOW)
    async with fake:
        core_factory._fake = fake
        settings = make_settings(bot_context_window=WINDOW, bot_compact_at=0.5)
        core = await core_factory(settings=settings)
        core.toolbox.add(dump)
        turn = 0
        while not any(user_texts(b)[-1].startswith("Summarise the conversation") for b in fake.requests):
            await core.engine.run_turn(KEY, f"turn {turn}")
            turn += 1
        summary = next(t for t in user_texts({"messages": await core.store.load_messages(KEY)}) if SUMMARY_PREFIX in t)
        await core_factory.close(core)
        again = await core_factory(settings=settings)
        again.toolbox.add(dump)
        await again.engine.run_turn(KEY, "and now?")
        first_user_text = user_texts(fake.requests[-1])[0]
        assert first_user_text == summary


async def test_a_huge_message_is_truncated_with_a_note(fake: FakeAnthropic, core_factory: CoreFactory) -> None:
    core = await core_factory(bot_max_input_chars=5_000)
    await core.engine.run_turn(KEY, "x" * 50_000)
    sent = user_texts(fake.requests[-1])[-1]
    assert sent.startswith("x" * 5_000) and "[truncated: 45000 more characters not shown]" in sent
    assert not fake.rejections


def test_stubs_keep_the_call_and_its_pairing() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [text("go")]},
        {"role": "assistant", "content": [tool_use("dump", {}, id="toolu_a")]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "first line\n" + BIG}],
        },
        {"role": "assistant", "content": [tool_use("dump", {}, id="toolu_b")]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_b", "content": BIG, "is_error": True}],
        },
        {"role": "assistant", "content": [text("done")]},
        {"role": "user", "content": [text("[background tool result] dump (tool_call_id toolu_c) finished\n" + BIG)]},
    ]
    assert stub_old_results(messages, keep_recent=1)
    assert messages[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_a",
        "content": f"{STUB_PREFIX} dump completed: first line…",
    }
    assert messages[4]["content"][0]["content"].startswith(f"{STUB_PREFIX} dump failed: lorem ipsum")
    assert messages[6]["content"][0]["text"].endswith(BIG)  # the most recent user message is kept whole
    assert tool_pairs_hold(messages)
    assert not stub_old_results(messages, keep_recent=1)  # nothing left to clear


def test_summaries_cut_only_before_a_persons_message() -> None:
    result = {"type": "tool_result", "tool_use_id": "toolu_a", "content": BIG}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [text("one")]},
        {"role": "assistant", "content": [tool_use("dump", {}, id="toolu_a")]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": [text("a")]},
        {"role": "user", "content": [text("two")]},
        {"role": "assistant", "content": [text("b")]},
    ]
    assert summary_cut(messages, keep_chars=10**6) == 4  # the earliest cut that keeps a whole turn
    assert summary_cut(messages[:4], keep_chars=10) is None  # nothing before the current turn
    truncated = [{"role": "user", "content": "y" * 3_000}, {"role": "user", "content": [text("z" * 3_000)]}]
    assert truncate_inputs(truncated, 0, 2_000)
    assert "[truncated: 1000 more characters not shown]" in truncated[0]["content"]


def test_images_count_by_what_they_cost_not_their_base64() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 1_000_000}}
    plain = [{"role": "user", "content": [text("look")]}]
    with_image = [{"role": "user", "content": [text("look"), image]}]
    in_result = [
        {"role": "user", "content": [text("look")]},
        {"role": "assistant", "content": [tool_use("shot", {}, id="toolu_i")]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_i", "content": [image]}]},
    ]
    base = request_chars("", [], plain)
    assert base + IMAGE_CHARS - 100 < request_chars("", [], with_image) < base + IMAGE_CHARS + 200
    assert request_chars("", [], in_result) < base + IMAGE_CHARS + 400
