"""Token accounting: every model call booked with its session, turn, person and model; the report and counters."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from conftest import MODEL, CoreFactory
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use
from test_console import bot_env, run_bot

from bot.clock import utcnow
from bot.model.metering import UsageMeter
from bot.model.prices import Price
from bot.store import Store
from bot.store.usage import UsageGrouping, UsageRow
from bot.telemetry.metrics import Metrics
from bot.types import Usage
from bot.usage_report import parse_since, render


async def test_each_model_call_is_booked_with_its_turn_and_requester(
    fake: FakeAnthropic, core_factory: CoreFactory
) -> None:
    core = await core_factory()
    fake.script(Reply.tools(tool_use("now", {})), Reply.text_only("done"))
    core.engine.submit("console:a", "time?", requester="U1")
    await core.engine.wait_turn("console:a")
    rows = await core.store.usage_by(UsageGrouping.USER)
    assert [(r.group, r.model, r.calls) for r in rows] == [("U1", MODEL, 2)]
    reported = fake.usages
    assert rows[0].usage == Usage(
        sum(u["input_tokens"] for u in reported),
        sum(u["output_tokens"] for u in reported),
        sum(u["cache_read_input_tokens"] for u in reported),
        sum(
            u["cache_write_input_tokens"] if "cache_write_input_tokens" in u else u["cache_creation_input_tokens"]
            for u in reported
        ),
    )
    assert core.usage.totals[MODEL] == rows[0].usage
    by_session = await core.store.usage_by(UsageGrouping.SESSION)
    assert [r.group for r in by_session] == ["console:a"]


async def test_usage_groups_by_day_channel_and_model(any_store: Store) -> None:
    store = any_store
    await store.ensure_session("slack:T:C1:1.0", {"channel": "C1"})
    await store.ensure_session("slack:T:C2:2.0", {"channel": "C2"})
    for key, model in (("slack:T:C1:1.0", "m1"), ("slack:T:C1:1.0", "m2"), ("slack:T:C2:2.0", "m1")):
        await store.record_usage(session_key=key, turn_id=f"{key}#1", model=model, usage=Usage(10, 5, 100, 20))
    await store.record_usage(session_key="heartbeat:decision", turn_id=None, model="m1", usage=Usage(1, 1, 0, 0))
    channels = await store.usage_by(UsageGrouping.CHANNEL)
    assert [(r.group, r.model, r.calls) for r in channels] == [
        ("(none)", "m1", 1),
        ("C1", "m1", 1),
        ("C1", "m2", 1),
        ("C2", "m1", 1),
    ]
    models = {r.model: r.usage for r in await store.usage_by(UsageGrouping.MODEL)}
    assert models["m1"] == Usage(21, 11, 200, 40)
    today = utcnow().date().isoformat()
    assert {r.group for r in await store.usage_by(UsageGrouping.DAY)} == {today}
    assert await store.usage_by(UsageGrouping.DAY, since=utcnow() + timedelta(seconds=1)) == []


def test_the_table_prices_each_row_and_totals() -> None:
    rows = [
        UsageRow("2026-12-01", "m1", 3, Usage(1_000_000, 100_000, 3_000_000, 0)),
        UsageRow("2026-12-01", "unknown", 1, Usage(10, 1, 0, 0)),
    ]
    table = render(rows, UsageGrouping.DAY, {"m1": Price(input=3, output=15, cache_read=0.3, cache_write=3.75)})
    header, first, second, total = table.splitlines()
    assert header.split()[0] == "day" and "est. cost" in header
    assert "$5.4000" in first and "75%" in first  # 3 + 1.5 + 0.9; 3M of 4M input read from cache
    assert second.rstrip().endswith("?")
    assert total.startswith("total") and "$5.4000 + ?" in total


def test_since_spans() -> None:
    now = utcnow()
    assert parse_since("7d", now) == now - timedelta(days=7)
    assert parse_since("90m", now) == now - timedelta(minutes=90)
    assert parse_since("all", now) is None
    with pytest.raises(ValueError, match="unit"):
        parse_since("7 days", now)


def test_metrics_render_token_counters_by_model() -> None:
    meter = UsageMeter()
    meter.add("m1", Usage(1, 2, 3, 4))
    meter.add("m1", Usage(1, 0, 0, 0))
    metrics = Metrics()
    metrics.counter_family(
        "model_input_tokens_total",
        "uncached input tokens",
        "model",
        lambda: {m: float(u.input_tokens) for m, u in meter.totals.items()},
    )
    assert 'threadbot_model_input_tokens_total{model="m1"} 2.0\n' in metrics.render()


async def test_the_usage_command_prints_the_books(tmp_path: Path, fake: FakeAnthropic) -> None:
    env = bot_env(fake, tmp_path)
    code, _, err = await run_bot("oneshot", "hello", env=env, cwd=tmp_path)
    assert code == 0, err
    code, out, err = await run_bot("usage", "--by", "model", env=env, cwd=tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["model", "calls"] and lines[1].split()[:2] == [MODEL, "1"]
    assert next(line for line in lines if line.startswith("total")).split()[:2] == ["total", "1"]
    assert lines[-1] == "quotas: nobody is at 80% of a limit today (UTC)"
    code, out, _ = await run_bot("usage", "--since", "soon", env=env, cwd=tmp_path)
    assert code == 2 and "--since" in out
