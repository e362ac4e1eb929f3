"""`threadbot usage`: what the model calls cost, from the store's books.

One row per group (day, channel, user, model or session) and model, with the
tokens of each kind, the share of input read from the prompt cache, and an
estimated cost from the price table (`bot.model.prices`, `BOT_MODEL_PRICES`). Below it, who is
near a quota today: a daily token budget, their pending reminders, a thread's self-wakes.
With `--feedback`, how people rated the answers instead: 👍 and 👎 per model, and the latest ratings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.clock import utcnow
from bot.config import Settings
from bot.model.prices import Price
from bot.quotas import Quotas, day_start, reset_text
from bot.store import Store, open_store
from bot.store.feedback import FeedbackRecord, FeedbackTally, Rating
from bot.store.usage import UsageGrouping, UsageRow
from bot.types import Usage

_SPAN = re.compile(r"(\d+)([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
NEAR_SHARE = 0.8
"""From what share of a quota a person, channel or thread is listed as near it."""
FEEDBACK_HEADERS = ("model", "👍", "👎", "👍 share")
RECENT_FEEDBACK = 10
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


@dataclass(frozen=True, slots=True)
class NearLimit:
    """One person, channel or thread at NEAR_SHARE or more of a quota today."""

    who: str
    what: str
    used: int
    limit: int
    variable: str

    def line(self) -> str:
        share = f"{self.used / self.limit:.0%}"
        return f"{self.who}  {self.what} {self.used:,} of {self.limit:,} ({share}, {self.variable})"


async def near_limits(store: Store, quotas: Quotas, now: datetime) -> list[NearLimit]:
    """Who is at NEAR_SHARE or more of a daily budget, of their pending reminders, or of a thread's self-wakes."""
    since = day_start(now)
    found: list[NearLimit] = []
    budgets = (
        (UsageGrouping.USER, quotas.daily_tokens_per_user, "BOT_DAILY_TOKENS_PER_USER"),
        (UsageGrouping.CHANNEL, quotas.daily_tokens_per_channel, "BOT_DAILY_TOKENS_PER_CHANNEL"),
    )
    for grouping, budget, variable in budgets:
        if budget is not None:
            for who, used in await store.top_spenders(grouping, since=since):
                found.append(NearLimit(who, "tokens today", used, budget, variable))
    for who, pending in await store.pending_by_person():
        found.append(
            NearLimit(
                who, "pending reminders and waits", pending, quotas.max_reminders_per_user, "BOT_MAX_REMINDERS_PER_USER"
            )
        )
    if quotas.max_self_wakes_per_day > 0:
        for who, woken in await store.wakes_by_session(since=since):
            found.append(
                NearLimit(who, "self-wakes today", woken, quotas.max_self_wakes_per_day, "BOT_MAX_SELF_WAKES_PER_DAY")
            )
    return [item for item in found if item.used >= NEAR_SHARE * item.limit]


def render_limits(near: list[NearLimit], now: datetime) -> str:
    """The report's last part: who is close to a quota, or one line saying nobody is."""
    if not near:
        return f"quotas: nobody is at {NEAR_SHARE:.0%} of a limit today (UTC)"
    lines = [f"quotas: at {NEAR_SHARE:.0%} or more of a limit today (UTC; daily counts {reset_text(now)})"]
    return "\n".join([*lines, *(f"  {item.line()}" for item in near)])


def render_feedback(tallies: list[FeedbackTally], recent: list[FeedbackRecord]) -> str:
    """The ratings per model with a total line, then the latest ones (when, who, how, which turn)."""
    lines = [list(FEEDBACK_HEADERS)]
    for tally in [*tallies, FeedbackTally("total", sum(t.good for t in tallies), sum(t.bad for t in tallies))]:
        rated = tally.good + tally.bad
        lines.append([tally.model, str(tally.good), str(tally.bad), f"{tally.good / rated:.0%}" if rated else "-"])
    widths = [max(len(cell) for cell in column) for column in zip(*lines, strict=True)]
    table = "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in lines)
    if not recent:
        return f"{table}\n\nno answers rated yet"
    faces = {Rating.GOOD: "👍", Rating.BAD: "👎"}
    latest = [f"  {r.at:%Y-%m-%d %H:%M}  {faces[r.rating]}  {r.user}  {r.model}  {r.turn_id}" for r in recent]
    return "\n".join([table, "", f"latest {len(recent)} ratings (UTC):", *latest])


async def usage_report(settings: Settings, *, since: str, by: str, feedback: bool = False) -> int:
    """Print the table (or, with `feedback`, the answers' ratings); 2 for a bad argument, 0 otherwise (an empty
    book prints an empty table)."""
    try:
        start = parse_since(since, utcnow())
        grouping = UsageGrouping(by)
    except ValueError as exc:
        print(f"threadbot usage: {exc}")
        return 2
    now = utcnow()
    store = await open_store(settings)
    if feedback:
        try:
            tallies = await store.feedback_by_model(since=start)
            recent = await store.recent_feedback(since=start, limit=RECENT_FEEDBACK)
        finally:
            await store.close()
        print(render_feedback(tallies, recent))
        return 0
    try:
        rows = await store.usage_by(grouping, since=start)
        near = await near_limits(store, settings.quotas, now)
    finally:
        await store.close()
    print(render(rows, grouping, settings.prices))
    print()
    print(render_limits(near, now))
    return 0
