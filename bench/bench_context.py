"""Cost of a long thread: prompt caching and compaction, on and off, in one run.

Run: `.venv/bin/python bench/bench_context.py`. Prints figures, asserts nothing (issue 11).
A scripted 50-turn thread: each turn the model fetches a ~6,000-character document with a tool,
then answers; the engine runs exactly as the daemon wires it, against the fake Messages API,
whose prompt cache reads back only byte-equal prefixes (at least 1,024 tokens, as the API's
minimum) and whose tokenizer counts a quarter token per character. Cost is estimated from the
default price of the model (bot/model/prices.py). "compaction off" is a context window large
enough never to compact, which is today's behaviour until the thread dies of its length.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakes.anthropic_api import FakeAnthropic, Outcome, Reply, tool_use  # noqa: E402
from support import Edge, sdk_provider  # noqa: E402

from bot.app import open_core  # noqa: E402
from bot.config import load_settings  # noqa: E402
from bot.model.prices import DEFAULT_PRICES  # noqa: E402
from bot.types import Usage  # noqa: E402
from tools.base import ToolContext, tool  # noqa: E402

TURNS = 50
WINDOW = 40_000
DOCUMENT = "The quarterly report lists revenue, costs and the outlook for each region. " * 80


@tool("fetch_document", "Fetch the latest version of the report.", quick=True)
def fetch_document(args: dict[str, Any], ctx: ToolContext) -> str:
    return DOCUMENT


def model(body: dict[str, Any]) -> Outcome:
    last = body["messages"][-1]["content"]
    blocks = last if isinstance(last, list) else []
    if any(b.get("text", "").startswith("Summarise the conversation above") for b in blocks):
        return Reply.text_only("Summary: the person asked about the report each turn; it was fetched and read.")
    if any(b.get("type") == "tool_result" for b in blocks):
        return Reply.text_only("Revenue is up in every region; costs are flat. " * 4)
    return Reply.tools(tool_use("fetch_document", {}), text="Let me fetch the report.")


async def run(*, cache: bool, compact: bool) -> tuple[Usage, int]:
    fake = FakeAnthropic(model, min_cacheable_tokens=1024)
    async with fake:
        with tempfile.TemporaryDirectory() as data:
            settings = load_settings(
                _env_file=None,
                bot_data_dir=Path(data),
                bot_prompt_cache="5m" if cache else "off",
                bot_context_window=WINDOW if compact else 10_000_000,
            )
            provider = sdk_provider(fake, settings.cache_ttl)
            async with open_core(settings, Edge(), provider=provider) as core:  # type: ignore[arg-type]
                core.toolbox.add(fetch_document)
                for turn in range(TURNS):
                    outcome = await core.engine.run_turn("bench:thread", f"turn {turn}: what does the report say?")
                    assert outcome is not None and outcome.error is None, outcome
            await provider.close()
    # Every request counts, the summaries included.
    usages = [
        Usage(u["input_tokens"], u["output_tokens"], u["cache_read_input_tokens"], u["cache_creation_input_tokens"])
        for u in fake.usages
    ]
    return sum(usages, Usage()), max(u.prompt_tokens for u in usages)


async def main() -> None:
    price = DEFAULT_PRICES["claude-sonnet-5-5"]
    print(f"{TURNS}-turn thread, one tool call per turn; compaction window {WINDOW:,} tokens")
    columns = ("input tokens sent", "cached", "largest request", "est. cost")
    print(f"  {'caching':<8} {'compaction':<11} {columns[0]:>18} {columns[1]:>7} {columns[2]:>16} {columns[3]:>10}")
    for cache, compact in ((False, False), (True, False), (False, True), (True, True)):
        usage, peak = await run(cache=cache, compact=compact)
        cached = usage.cache_read_tokens / usage.prompt_tokens
        print(
            f"  {'on' if cache else 'off':<8} {'on' if compact else 'off':<11} {usage.prompt_tokens:>18,} "
            f"{cached:>7.0%} {peak:>16,} {'$' + format(price.cost(usage), '.4f'):>10}"
        )


if __name__ == "__main__":
    asyncio.run(main())
