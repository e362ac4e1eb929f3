"""Cluster benchmark: one SQLite process vs 1 and 3 PostgreSQL replicas, side by side, against the fakes.

Run: `.venv/bin/python bench/bench_cluster.py [--quick]` (about three minutes; `--quick` about one).
Prints figures; asserts nothing. Every set-up is real `threadbot run` processes (tests/cluster_rig.py's
`Cluster`, test_e2e_slack's `Daemon`) on the fake Slack and the fake model; PostgreSQL is
THREADBOT_TEST_DATABASE_URL (default postgresql://127.0.0.1:5432/test), a scratch schema per set-up,
migrated as `threadbot migrate` would. SQLite (no BOT_DATABASE_URL) is the baseline, in the same run.
- event → ack latency (p50/p99): mentions at a steady rate (each one a turn, so the turns load the box too),
  from the fake sending the envelope to its ack. A cluster acks only after the durable effect (bot/slack/app.py),
  SQLite before its listener runs, so the columns measure different work by design.
- injection latency (p50/p95, target p95 < 500 ms via a non-owner): a reply in a thread whose turn waits on a
  long sleep_for, until the model request carrying the "[mid-turn user note]" arrives. The owner starts
  alone and runs every such turn; the others join afterwards and the fake routes to the newest connection,
  so with 3 replicas the reply always lands on a replica that does not run the turn. With one process the
  owner is the only one: that column measures the local path and says so.
- cancel latency (p50/p95, target p95 < 100 ms via a non-owner): an ❌ reaction on the status message, until
  the call's row says cancelled (its completed_at is when the owner cancelled it, so polling adds nothing),
  and until the model receives the cancelled result (the turn has moved on: an upper bound).
- turns per second: N threads at once, each one text-only answer, from the first mention to the last answer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import pytest  # noqa: E402
from cluster_rig import cluster  # noqa: E402
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use, user_texts  # noqa: E402
from fakes.slack_api import FakeSlack, StoredMessage  # noqa: E402
from store_backends import scratch_schema  # noqa: E402
from support import pct  # noqa: E402
from test_e2e_slack import Daemon, status_posts  # noqa: E402

WAIT_S = 60.0
INJECTION_TARGET_S = 0.500
CANCEL_TARGET_S = 0.100
NOTE = "[mid-turn user note]"

Rows = list[tuple[Any, ...]]


@dataclass
class Sizes:
    mentions: int
    ack_rate: float
    samples: int
    threads: int


@dataclass
class Figures:
    """One set-up's measurements, in seconds."""

    name: str
    replicas: int
    acks: list[float] = field(default_factory=list)
    injections: list[float] = field(default_factory=list)
    cancels_row: list[float] = field(default_factory=list)
    cancels_model: list[float] = field(default_factory=list)
    turns_per_s: float = 0.0


@dataclass
class Setup:
    """What a set-up's measurements need: the fakes, a way to start replicas, and the store's rows."""

    slack: FakeSlack
    model: FakeAnthropic
    start: Callable[[int], Awaitable[object]]
    query: Callable[[str], Awaitable[Rows]]
    logs: Callable[[], str]


# --- the model -------------------------------------------------------------------------------------------


class Model:
    """The fake model's answers: "long …" threads run a 10-minute sleep_for, everything else answers at once."""

    def __init__(self) -> None:
        self.call_ids: dict[str, str] = {}

    def __call__(self, request: dict[str, Any]) -> Reply:
        first = user_texts(request)[0].split("> ", 1)[-1]
        if first.startswith("long ") and len(request["messages"]) == 1:
            use = tool_use("sleep_for", {"seconds": 600})
            self.call_ids[first] = use["id"]
            return Reply.tools(use)
        return Reply.text_only(f"re: {first}")


def cancelled_result(request: dict[str, Any], words: str) -> bool:
    return user_texts(request)[0].endswith(words) and "cancelled by" in str(request["messages"][-1]["content"])


# --- set-ups ---------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def sqlite_setup(root: Path) -> AsyncIterator[Setup]:
    """The default: one process, SQLite in its data dir."""
    async with FakeSlack() as slack, FakeAnthropic() as model:
        data_dir = root / "sqlite"
        data_dir.mkdir()
        daemon = Daemon(slack, model, data_dir)

        async def start(count: int) -> None:
            assert count == 1, "SQLite is one process"
            await daemon.start()
            await slack.wait_connected(WAIT_S)

        async def query(statement: str) -> Rows:
            with contextlib.closing(sqlite3.connect(f"file:{data_dir / 'bot.db'}?mode=ro", uri=True)) as db:
                return db.execute(statement).fetchall()

        try:
            yield Setup(slack, model, start, query, daemon.log)
        finally:
            try:
                await daemon.stop()
            finally:
                if daemon.process is not None and daemon.process.returncode is None:
                    daemon.process.kill()


@contextlib.asynccontextmanager
async def postgres_setup(root: Path) -> AsyncIterator[Setup]:
    """Replicas on one scratch schema, migrated first (cluster_rig)."""
    with scratch_schema() as dsn:
        async with cluster(dsn, root) as rig:
            yield Setup(rig.slack, rig.model, rig.start, rig.query, rig.logs)


# --- phases ----------------------------------------------------------------------------------------------


async def mention(slack: FakeSlack, channel: str, words: str) -> tuple[dict[str, Any], str]:
    """A mention as Slack sends it (the `app_mention` and its `message` twin); the event and its envelope."""
    event = slack.mention(channel, words)
    envelope = await slack.send_event(event)
    await slack.send_event({**event, "type": "message", "channel_type": "channel"})
    return event, envelope


def answered(slack: FakeSlack, event: dict[str, Any]) -> StoredMessage | None:
    return next((m for m in slack.posts_in_thread(event["channel"], event["ts"]) if m.text.startswith("re: ")), None)


async def answers(setup: Setup, prefix: str, count: int) -> None:
    """A burst of `count` one-answer turns, each in its own channel (Slack paces posts per channel)."""
    events = [(await mention(setup.slack, f"{prefix}{i:03d}", f"{prefix} {i}"))[0] for i in range(count)]
    await setup.slack.wait_for(lambda: all(answered(setup.slack, e) for e in events), WAIT_S, f"{prefix} answers")


async def start_long_turns(setup: Setup, prefix: str, count: int) -> list[tuple[dict[str, Any], StoredMessage]]:
    """`count` threads whose turn waits on a long sleep_for; their status messages, known to the store."""
    events = [(await mention(setup.slack, f"{prefix}{i:03d}", f"long {prefix} {i}"))[0] for i in range(count)]

    def statuses() -> list[StoredMessage] | None:
        found = [status_posts(setup.slack, e["channel"], e["ts"]) for e in events]
        return [posts[0] for posts in found] if all(found) else None

    posted = await setup.slack.wait_for(statuses, WAIT_S, f"the {prefix} status messages")
    return list(zip(events, posted, strict=True))


async def rows_where(setup: Setup, statement: str, ok: Callable[[Rows], bool]) -> Rows:
    """Poll the store (the one thing with no event to wait on) until its rows pass `ok`."""
    async with asyncio.timeout(WAIT_S):
        while True:
            rows = await setup.query(statement)
            if ok(rows):
                return rows
            await asyncio.sleep(0.05)


async def wait_places(setup: Setup, count: int) -> None:
    """Until every status message's place is stored: what lets any replica map a reaction to its call."""
    await rows_where(setup, "SELECT count(*) FROM call_displays", lambda rows: rows[0][0] >= count)


async def injection_latencies(setup: Setup, threads: list[tuple[dict[str, Any], StoredMessage]]) -> list[float]:
    slack, model = setup.slack, setup.model
    latencies = []
    for i, (event, _) in enumerate(threads):
        words = f"note {i}"
        before = len(model.requests)
        sent = time.perf_counter()
        await slack.send_event(slack.user_message(event["channel"], words, thread_ts=event["ts"]))

        def arrived(words: str = words, before: int = before) -> float | None:
            pairs = zip(model.requests[before:], model.request_times[before:], strict=True)
            hits = [t for r, t in pairs if f"{NOTE} {words}" in user_texts(r)]
            return hits[0] if hits else None

        latencies.append(await slack.wait_for(arrived, WAIT_S, f"the model request with {words!r}") - sent)
        await slack.wait_for(partial(answered, slack, event), WAIT_S, "the answer to the note")
    return latencies


async def cancel_latencies(
    setup: Setup, script: Model, threads: list[tuple[dict[str, Any], StoredMessage]]
) -> tuple[list[float], list[float]]:
    slack, model = setup.slack, setup.model
    to_row, to_model = [], []
    for event, status in threads:
        words = event["text"].split("> ", 1)[-1]
        call_id = script.call_ids[words]
        sent_wall, sent = time.time(), time.perf_counter()
        await slack.send_event(slack.reaction_added("U1", "x", event["channel"], status.ts))

        def told(words: str = words) -> float | None:
            hits = [t for r, t in zip(model.requests, model.request_times, strict=True) if cancelled_result(r, words)]
            return hits[0] if hits else None

        to_model.append(await slack.wait_for(told, WAIT_S, f"the model told of {words!r} cancelled") - sent)
        to_row.append((await cancelled_at(setup, call_id)).timestamp() - sent_wall)
    return to_row, to_model


async def cancelled_at(setup: Setup, call_id: str) -> datetime:
    """When the owner cancelled the call, as its row records it (so the polling here adds nothing)."""
    statement = f"SELECT completed_at FROM tool_calls WHERE id = '{call_id}' AND status = 'cancelled'"
    rows = await rows_where(setup, statement, bool)
    return datetime.fromisoformat(rows[0][0])


async def ack_latencies(slack: FakeSlack, count: int, rate_per_s: float) -> list[float]:
    """`count` mentions at `rate_per_s`, each in its own channel (and each a turn); each one's envelope-to-ack time."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    envelopes, events = [], []
    for i in range(count):
        delay = start + i / rate_per_s - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        event, envelope = await mention(slack, f"A{i:03d}", f"ack {i}")
        envelopes.append(envelope)
        events.append(event)
    await slack.wait_for(lambda: all(e in slack.acks for e in envelopes), WAIT_S, "every ack")
    await slack.wait_for(lambda: all(answered(slack, e) for e in events), WAIT_S, "every ack-phase answer")
    sent = {e.envelope_id: e.time for e in slack.envelopes}
    return [slack.acks[e].time - sent[e] for e in envelopes]


async def turns_per_second(slack: FakeSlack, count: int) -> float:
    started = time.perf_counter()
    events = [(await mention(slack, f"T{i:03d}", f"turn {i}"))[0] for i in range(count)]

    def every_answer() -> list[StoredMessage] | None:
        found = [answered(slack, e) for e in events]
        return [post for post in found if post is not None] if all(found) else None

    posts = await slack.wait_for(every_answer, WAIT_S, "every answer")
    return count / (max(p.history[0].time for p in posts) - started)


async def measure(name: str, replicas: int, setup: Setup, script: Model, sizes: Sizes) -> Figures:
    figures = Figures(name, replicas)
    setup.model.default = script
    await setup.start(1)  # the owner, alone: every long turn below runs on it
    await answers(setup, "W", 2)  # the first model request builds the SDK's lazy parts (~0.1 s, once)
    injected = await start_long_turns(setup, "I", sizes.samples)
    cancelled = await start_long_turns(setup, "X", sizes.samples)
    await wait_places(setup, 2 * sizes.samples)
    if replicas > 1:
        await setup.start(replicas - 1)  # newest-connection routing: from now on the owner gets no envelope
    figures.injections = await injection_latencies(setup, injected)
    figures.cancels_row, figures.cancels_model = await cancel_latencies(setup, script, cancelled)
    setup.slack.routing = "random"  # the rest spreads over every replica
    await answers(setup, "V", 3 * replicas)  # every replica's first turn (lazy parts) before timing
    figures.acks = await ack_latencies(setup.slack, sizes.mentions, sizes.ack_rate)
    figures.turns_per_s = await turns_per_second(setup.slack, sizes.threads)
    return figures


# --- report ----------------------------------------------------------------------------------------------


def pair(values: list[float], high: float) -> str:
    return f"{pct(values, 50) * 1000:6.1f} / {pct(values, high) * 1000:6.1f}" if values else "n/a"


def report(results: list[Figures], sizes: Sizes) -> None:
    width = 29
    head = "".join(f"{f.name:>{width}}" for f in results)
    print(f"\n{'':<44}{head}")

    def row(label: str, cells: list[str], target: str = "") -> None:
        print(f"{label:<44}" + "".join(f"{c:>{width}}" for c in cells) + (f"   {target}" if target else ""))

    def where(f: Figures) -> str:
        return "(local)" if f.replicas == 1 else "(non-owner)"

    row(f"event→ack p50/p99 ms ({sizes.mentions} at {sizes.ack_rate:g}/s)", [pair(f.acks, 99) for f in results])
    row(
        f"injection p50/p95 ms ({sizes.samples})",
        [f"{where(f)} {pair(f.injections, 95)}" for f in results],
        "target non-owner p95 < 500 ms",
    )
    row(
        f"cancel → row p50/p95 ms ({sizes.samples})",
        [f"{where(f)} {pair(f.cancels_row, 95)}" for f in results],
        "target non-owner p95 < 100 ms",
    )
    row("cancel → model gets result p50/p95 ms", [f"{where(f)} {pair(f.cancels_model, 95)}" for f in results])
    row(f"turns/s ({sizes.threads} threads, fake model)", [f"{f.turns_per_s:.1f}" for f in results])
    for f in results:
        if f.replicas > 1:
            inject_ok = pct(f.injections, 95) < INJECTION_TARGET_S
            cancel_ok = pct(f.cancels_row, 95) < CANCEL_TARGET_S
            print(f"\n{f.name}: injection via non-owner {'meets' if inject_ok else 'MISSES'} target", end="")
            print(f", cancel via non-owner {'meets' if cancel_ok else 'MISSES'} target")


async def run(which: list[str], sizes: Sizes) -> None:
    print(f"threadbot cluster benchmark ({os.cpu_count()} CPUs, Python {sys.version.split()[0]})")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in which:
            replicas = 1 if kind in ("sqlite", "pg1") else 3
            name = "SQLite, 1 process" if kind == "sqlite" else f"PostgreSQL, {replicas} replica{'s' * (replicas > 1)}"
            root = Path(tmp) / kind
            root.mkdir()
            started = time.perf_counter()
            try:
                opened = sqlite_setup(root) if kind == "sqlite" else postgres_setup(root)
                async with opened as setup:
                    try:
                        results.append(await measure(name, replicas, setup, Model(), sizes))
                    except BaseException:
                        print(f"{name} failed; logs (tail):\n{setup.logs()[-6000:]}")
                        raise
            except pytest.skip.Exception as skipped:
                print(f"{name}: skipped, {skipped.msg}")
                continue
            print(f"  {name}: measured in {time.perf_counter() - started:.0f} s")
    report(results, sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, about a minute")
    parser.add_argument("--mentions", type=int, help="mentions for the ack latency (default 200, quick 60)")
    parser.add_argument("--ack-rate", type=float, default=40, help="mentions a second for the ack latency")
    parser.add_argument("--samples", type=int, help="injections and cancels each (default 20, quick 8)")
    parser.add_argument("--threads", type=int, help="threads for turns per second (default 100, quick 30)")
    parser.add_argument("--setups", default="sqlite,pg1,pg3", help="comma-separated: sqlite, pg1, pg3")
    args = parser.parse_args()
    sizes = Sizes(
        mentions=args.mentions or (60 if args.quick else 200),
        ack_rate=args.ack_rate,
        samples=args.samples or (8 if args.quick else 20),
        threads=args.threads or (30 if args.quick else 100),
    )
    asyncio.run(run(args.setups.split(","), sizes))


if __name__ == "__main__":
    main()
