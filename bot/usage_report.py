"""`threadbot usage`: what the model calls cost, from the store's books.

One row per group (day, channel, user, model or session) and model, with the
tokens of each kind, the share of input read from the prompt cache, and an
estimated cost from the price table (`bot.model.prices`, `BOT_MODEL_PRICES`).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from bot.calls.models import utcnow
from bot.config import Settings
from bot.model.prices import Price
from bot.store import open_store
from bot.store.usage import UsageGrouping, UsageRow
from bot.types import Usage

_SPAN = re.compile(r"(\d+)([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
HEADERS = ("{by}", "model", "calls", "input", "output", "cache read", "cache write", "cached", "est. cost")


def parse_since(text: str, now: datetime) -> datetime | None:
    """`7d`, `24h`, `90m`, `2w` back from `now`; `all` (None) for everything. ValueError otherwise."""
    if text == "all":
        return None
    match = _SPAN.fullmatch(text.strip())
    if not match:
        raise ValueError(f"--since {text!r}: use a number and a unit (m, h, d, w), e.g. 7d, or all")
    return now - timedelta(**{_UNITS[match[2]]: int(match[1])})


def cached_share(usage: Usage) -> str:
    return f"{usage.cache_read_tokens / usage.prompt_tokens:.0%}" if usage.prompt_tokens else "-"


def render(rows: list[UsageRow], by: UsageGrouping, prices: dict[str, Price]) -> str:
    """A plain-text table with a total line; a model missing from the price table costs "?"."""
    lines = [[header.format(by=by.value) for header in HEADERS]]
    total, total_cost, priced = Usage(), 0.0, True
    for row in rows:
        price = prices.get(row.model)
        cost = f"${price.cost(row.usage):,.4f}" if price is not None else "?"
        if price is not None:
            total_cost += price.cost(row.usage)
        priced = priced and price is not None
        total += row.usage
        lines.append([row.group, row.model, str(row.calls), *_token_cells(row.usage), cost])
    calls = sum(row.calls for row in rows)
    lines.append(["total", "", str(calls), *_token_cells(total), f"${total_cost:,.4f}" + ("" if priced else " + ?")])
    if by is UsageGrouping.MODEL:  # the group is the model: one column says it
        lines = [line[1:] for line in lines]
        lines[-1][0] = "total"
    widths = [max(len(cell) for cell in column) for column in zip(*lines, strict=True)]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in lines)


def _token_cells(usage: Usage) -> list[str]:
    counts = (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
    return [f"{count:,}" for count in counts] + [cached_share(usage)]


async def usage_report(settings: Settings, *, since: str, by: str) -> int:
    """Print the table; 2 for a bad argument, 0 otherwise (an empty book prints an empty table)."""
    try:
        start = parse_since(since, utcnow())
        grouping = UsageGrouping(by)
    except ValueError as exc:
        print(f"threadbot usage: {exc}")
        return 2
    store = await open_store(settings)
    try:
        rows = await store.usage_by(grouping, since=start)
    finally:
        await store.close()
    print(render(rows, grouping, settings.prices))
    return 0
