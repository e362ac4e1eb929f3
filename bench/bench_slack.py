"""Slack edge benchmark: ack latency, cancel latency, and the edit budget under load, against the fake Slack.

Run: `.venv/bin/python bench/bench_slack.py [abcde]` (about two minutes; name parts to run only those).
Prints figures; asserts nothing. Targets from issue 4:
(a) event-to-ack latency at 200 events/s, p50/p99 (target p99 ≤ 20 ms). The daemon gets a realistic mix:
    channel chatter it must look up and ignore, and every tenth event a mention that starts a turn.
    Baseline, measured in the same run: a bare bolt app whose listeners do nothing, same fake, same rate.
(b) reaction-to-cancelled latency, p99 (target ≤ 150 ms): a cancel reaction on a status message until the
    model receives the `cancelled` tool result (the call is final and the turn has moved on, an upper
    bound); also until the status message shows 🚫 (that edit waits its turn in the edit budget).
(c) 200 concurrent sleep_for calls across 50 threads with chat.update limited to 50 a minute by the fake:
    the number of 429s and of final states lost (target 0 lost).
(d) daemon CPU per tool turn (target ≤ 6 ms, issue 18): TURN_THREADS mentions at once, each a turn with one
    2 s sleep_for, run by a counted daemon (`--counted-daemon`, which runs `bot run` with aiosqlite's hops and
    SQLite's statements counted) twice: this tree, then the baseline tree `BENCH_BASELINE_TREE` (default
    /tmp/base45, made with `git worktree add /tmp/base45 45f8fd7`). Per turn: CPU of the event loop's thread,
    of the store's worker thread and of the rest; hops to that thread, SQL statements, commits, Slack calls and
    model requests. A second, profiled window splits the loop thread's CPU by package (cProfile self CPU time).
(e) a burst (issue 18: ack p99 ≤ 20 ms, mention → first model request p50 ≤ 1.5 s): BURST_MENTIONS mentions at
    BURST_RATE_PER_S over 10 channels, each a one-answer turn, on a plain daemon (`python -m bot run`) from this tree
    and then from the baseline tree: each envelope's ack latency and each mention's time to its first model request.
One warm-up turn runs before measuring (the first model request builds the anthropic SDK's lazy parts, a
one-time ~0.1 s stall). Both daemons are real processes on Socket Mode (`python -m bot run`, and this file
with `--baseline-app`); the fakes run in this process, so their own overhead is in both figures of (a).
`BENCH_PROFILE=/tmp/daemon.prof` runs the daemon of (a)-(c), and (e)'s, under cProfile; `BENCH_STATEMENTS=1` lists (d)'s
statements (and write transactions, by shape) per turn; `BENCH_PSTATS=/tmp/turns.pstats` writes (d)'s profiled
window for `pstats`, one file per tree (`/tmp/turns-base45.pstats`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakes.anthropic_api import FakeAnthropic, Reply, tool_use, user_texts  # noqa: E402
from fakes.slack_api import FakeSlack, StoredMessage  # noqa: E402

RATE_PER_S = 200
ACK_SECONDS = 5
MENTION_EVERY = 10
CANCEL_RUNS = 40
FANOUT_THREADS = 50
CALLS_PER_THREAD = 4
FINALS_DEADLINE_S = 150.0
TURN_THREADS = 200
TURN_CHANNELS = 10
TURN_SLEEP_S = 2
BURST_MENTIONS = 1000
BURST_RATE_PER_S = 200
BASELINE_TREE = Path(os.environ.get("BENCH_BASELINE_TREE", "/tmp/base45"))


# --- processes ---------------------------------------------------------------------------------------------


def _env(slack: FakeSlack, model: FakeAnthropic, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BOT_", "SLACK_", "ANTHROPIC_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        SLACK_API_URL=slack.api_url,
        SLACK_BOT_TOKEN="xoxb-bench",
        SLACK_APP_TOKEN="xapp-bench",
        ANTHROPIC_BASE_URL=model.url,
        ANTHROPIC_API_KEY="bench",
        BOT_DATA_DIR=str(data_dir),
        BOT_MAX_CONCURRENT_TOOLS=str(FANOUT_THREADS * CALLS_PER_THREAD + 56),
        BOT_LOG_FORMAT="text",
        BOT_SLACK_SURFACE="classic",  # its figures are the status messages' edit budget
    )
    return env


async def _spawn(args: list[str], env: dict[str, str], data_dir: Path, name: str) -> asyncio.subprocess.Process:
    log = (data_dir / f"{name}.log").open("wb")
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable, *args, cwd=data_dir, env=env, stdout=log, stderr=log
        )
    finally:
        log.close()


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()


def baseline_app() -> None:
    """The baseline daemon: bolt over Socket Mode with listeners that do nothing (run as a subprocess)."""
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_bolt.app.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    async def main() -> None:
        client = AsyncWebClient(token=os.environ["SLACK_BOT_TOKEN"], base_url=os.environ["SLACK_API_URL"])
        app = AsyncApp(name="baseline", client=client, signing_secret="")

        async def nothing() -> None:
            return None

        for kind in ("message", "app_mention", "reaction_added"):
            app.event(kind)(nothing)
        handler = AsyncSocketModeHandler(app, os.environ["SLACK_APP_TOKEN"])
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await handler.connect_async()  # type: ignore[no-untyped-call]
        await stop.wait()
        await handler.close_async()  # type: ignore[no-untyped-call]

    asyncio.run(main())


# --- figures -------------------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def verdict(ok: bool) -> str:
    return "meets target" if ok else "MISSES target"


# --- (a) ack latency --------------------------------------------------------------------------------------


async def ack_latencies(slack: FakeSlack, channel: str, with_mentions: bool) -> list[float]:
    """Send RATE_PER_S events a second for ACK_SECONDS on schedule; the latency of each ack, in seconds."""
    loop = asyncio.get_running_loop()
    envelopes: list[str] = []
    start = loop.time()
    for i in range(RATE_PER_S * ACK_SECONDS):
        delay = start + i / RATE_PER_S - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if with_mentions and i % MENTION_EVERY == 0:
            event = slack.mention(channel, f"bench mention {i}")
        else:
            event = slack.user_message(channel, f"chatter {i}", user=f"U{i % 7 + 2}")
        envelopes.append(await slack.send_event(event))
    await slack.wait_for(lambda: all(e in slack.acks for e in envelopes), 60, "every ack")
    sent = {e.envelope_id: e.time for e in slack.envelopes}
    return [slack.acks[e].time - sent[e] for e in envelopes]


async def warm_up(slack: FakeSlack) -> None:
    """One turn before measuring: the first model request builds the SDK's lazy parts (~0.1 s, once)."""
    event = await _mention(slack, "CWARM", "warm up")
    await slack.wait_for(lambda: slack.posts_in_thread("CWARM", event["ts"]), 30, "the warm-up answer")


# --- (b) cancel latency ---------------------------------------------------------------------------------------


def status_of(slack: FakeSlack, channel: str, root: str) -> StoredMessage | None:
    return next((m for m in slack.posts_in_thread(channel, root) if m.blocks and "accessory" in str(m.blocks)), None)


async def cancel_latencies(slack: FakeSlack, model: FakeAnthropic) -> tuple[list[float], list[float]]:
    channel = "CCANCEL"
    roots = [(await _mention(slack, channel, f"cancel-me {i}"))["ts"] for i in range(CANCEL_RUNS)]

    def every_status() -> list[StoredMessage] | None:
        found = [status_of(slack, channel, root) for root in roots]
        return [status for status in found if status is not None] if all(found) else None

    statuses = await slack.wait_for(every_status, 60, "every status message")
    to_model: list[float] = []
    to_status: list[float] = []
    for i, status in enumerate(statuses):
        prefix = f"cancel-me {i}"
        sent = time.perf_counter()
        await slack.send_event(slack.reaction_added("U1", "x", channel, status.ts))

        def told(prefix: str = prefix) -> float | None:
            hits = [t for r, t in zip(model.requests, model.request_times, strict=True) if _cancel_result(r, prefix)]
            return hits[0] if hits else None

        arrived = await slack.wait_for(told, 30, f"the model told of cancel {i}")
        to_model.append(arrived - sent)
        shown = await slack.wait_for(lambda s=status: "🚫" in s.text and s.history[-1].time, 30, "🚫 shown")
        to_status.append(shown - sent)
    return to_model, to_status


def _cancel_result(request: dict[str, Any], prefix: str) -> bool:
    texts = user_texts(request)
    return bool(texts) and texts[0] == prefix and "cancelled by U1" in str(request["messages"][-1]["content"])


async def _mention(slack: FakeSlack, channel: str, words: str) -> dict[str, Any]:
    event = slack.mention(channel, words)
    await slack.wait_ack(await slack.send_event(event), 30)
    return event


# --- (c) the edit budget -----------------------------------------------------------------------------------------


def fan_out_script() -> Callable[[dict[str, Any]], Reply]:
    def answer(request: dict[str, Any]) -> Reply:
        texts = user_texts(request)
        first = texts[0] if texts else ""
        if first.startswith("cancel-me") and len(request["messages"]) == 1:
            return Reply.tools(tool_use("sleep_for", {"seconds": 120}))
        if first.startswith("fan-out") and len(request["messages"]) == 1:
            n = int(first.split()[-1])
            return Reply.tools(*(tool_use("sleep_for", {"seconds": 5 + (n + k) % 4}) for k in range(CALLS_PER_THREAD)))
        if first.startswith("fan-out"):
            return Reply.text_only(f"all {CALLS_PER_THREAD} sleeps of {first} are done")
        if any("tool-turn" in t for t in texts):
            if "tool_result" not in str(request["messages"][-1]["content"]):
                return Reply.tools(tool_use("sleep_for", {"seconds": TURN_SLEEP_S}))
            return Reply.text_only("slept: the tool turn is done")
        return Reply.text_only("ok")

    return answer


async def edit_budget(slack: FakeSlack, model: FakeAnthropic) -> dict[str, float]:
    channel = "CFANOUT"
    slack.rate_limit("chat.update", per_minute=50)
    limited_before = slack.rate_limited["chat.update"]
    updates_before = len(slack.calls_to("chat.update"))
    started = time.perf_counter()
    roots = [(await _mention(slack, channel, f"fan-out {i}"))["ts"] for i in range(FANOUT_THREADS)]

    def statuses() -> list[StoredMessage]:
        posts = [post for root in roots for post in slack.posts_in_thread(channel, root)]
        return [post for post in posts if post.blocks and post.blocks[0]["type"] == "section"]

    def final(message: StoredMessage) -> bool:
        return message.text.count("✅") == CALLS_PER_THREAD and "accessory" not in str(message.blocks)

    def answered(root: str) -> bool:
        return any("sleeps of fan-out" in m.text for m in slack.posts_in_thread(channel, root))

    def all_landed() -> bool:
        found = statuses()
        return len(found) == FANOUT_THREADS and all(map(final, found)) and all(map(answered, roots))

    with contextlib.suppress(TimeoutError):
        await slack.wait_for(all_landed, FINALS_DEADLINE_S, "every final state")
    landed = time.perf_counter()
    # A thread's calls have all ended when its turn asks the model again (with all four results).
    results_asked = [t for r, t in zip(model.requests, model.request_times, strict=True) if _fan_out_results(r)]
    return {
        "status_lost": FANOUT_THREADS - sum(map(final, statuses())),
        "answers_lost": sum(not answered(root) for root in roots),
        "rate_limited": slack.rate_limited["chat.update"] - limited_before,
        "updates": len(slack.calls_to("chat.update")) - updates_before,
        "finals_after_s": landed - max(results_asked, default=landed),
        "total_s": landed - started,
    }


def _fan_out_results(request: dict[str, Any]) -> bool:
    texts = user_texts(request)
    return bool(texts) and texts[0].startswith("fan-out") and len(request["messages"]) > 1


# --- (d) CPU per tool turn ----------------------------------------------------------------------------------------

# Where the loop thread's self time goes, by the file a function lives in (first match wins).
BUCKETS = (
    ("store", ("/bot/store/", "/aiosqlite/", "sqlite3")),
    ("model client", ("/bot/model/", "/anthropic/", "/httpx", "/httpcore", "/h11/", "/anyio/", "/pydantic", "/jiter/")),
    ("Slack client", ("/slack_sdk/", "/slack_bolt/", "/aiohttp/", "/yarl/", "/multidict/")),
    ("own code", ("/bot/", "/tools/")),
    ("event loop", ("/asyncio/", "selectors", "epoll", "<built-in method select")),
)


class Transaction:
    """Counts each write transaction by its shape too (`[tx] 2× INSERT INTO messages … / UPDATE inbox …`), beside
    the statements: which writes of a turn have a commit of their own."""

    def __init__(self, kinds: dict[str, int]) -> None:
        self._kinds = kinds
        self._open: list[str] | None = None

    def see(self, kind: str) -> None:
        if kind == "BEGIN IMMEDIATE":
            self._open = []
        elif kind in ("COMMIT", "ROLLBACK") and self._open is not None:
            parts = [f"{n}× {k}" if n > 1 else k for k, n in Counter(self._open).items()]
            shape = f"[tx{'' if kind == 'COMMIT' else ', rolled back'}] " + " / ".join(parts)
            self._kinds[shape] = self._kinds.get(shape, 0) + 1
            self._open = None
        elif self._open is not None:
            self._open.append(kind[:40])


def counted_daemon(out: Path, tree: Path) -> None:
    """`bot run` from `tree`, counting hops to aiosqlite's thread and SQLite statements (a subprocess).

    Each SIGUSR1 appends a JSON snapshot of the counters and the CPU of each thread to `out`; the second
    starts cProfile on the loop's thread, the third stops it and adds its self time by bucket."""
    import cProfile
    import json
    import pstats
    import sqlite3
    import threading

    sys.path[:0] = [str(tree)]
    import aiosqlite

    counts = {"hops": 0, "statements": 0, "commits": 0}
    kinds: dict[str, int] = {}
    workers: list[int] = []
    main_thread = threading.get_ident()
    connect = sqlite3.connect

    transaction = Transaction(kinds)

    def trace(sql: str) -> None:
        counts["statements"] += 1
        counts["commits"] += sql.strip().upper() == "COMMIT"
        kind = re.sub(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b", "?", " ".join(sql.split()))[:100]  # values as ?
        kinds[kind] = kinds.get(kind, 0) + 1
        transaction.see(kind)

    def counted_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(trace)
        workers.append(threading.get_ident())
        return conn

    sqlite3.connect = counted_connect  # type: ignore[assignment]
    execute = aiosqlite.Connection._execute

    async def counted_execute(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        counts["hops"] += 1
        return await execute(self, fn, *args, **kwargs)

    aiosqlite.Connection._execute = counted_execute  # type: ignore[method-assign]
    profiler = cProfile.Profile(time.thread_time)  # CPU, not wall time: a wait in epoll costs nothing
    snapshots = 0

    def thread_cpu(ident: int) -> float:
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(ident))
        except OSError:
            return 0.0

    def snapshot(*_: object) -> None:
        nonlocal snapshots
        snapshots += 1
        figures: dict[str, Any] = dict(counts)
        figures["loop_cpu"] = thread_cpu(main_thread)
        figures["store_cpu"] = sum(thread_cpu(ident) for ident in workers)
        figures["process_cpu"] = time.process_time()
        figures["kinds"] = dict(kinds)
        if snapshots == 2:
            profiler.enable()
        if snapshots == 3:
            profiler.disable()
            stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
            split = dict.fromkeys([name for name, _ in BUCKETS] + ["other"], 0.0)
            for (path, _, name), (_, _, self_time, _, _) in stats.items():
                where = f"{path} {name}"
                bucket = next((b for b, marks in BUCKETS if any(mark in where for mark in marks)), "other")
                split[bucket] += self_time
            figures["split"] = split
            if os.environ.get("BENCH_PSTATS"):  # one file per tree: `turns.pstats` → `turns-base45.pstats`
                where = Path(os.environ["BENCH_PSTATS"])
                profiler.dump_stats(where.with_stem(f"{where.stem}-{tree.name}"))
        with out.open("a") as file:
            file.write(json.dumps(figures) + "\n")

    signal.signal(signal.SIGUSR1, snapshot)
    from bot.__main__ import main as bot_main

    sys.exit(bot_main(["run"]))


async def turn_cost(slack: FakeSlack, model: FakeAnthropic, tree: Path, data: Path) -> dict[str, Any]:
    """Two windows of TURN_THREADS tool turns on a counted daemon from `tree`: figures per turn, and the split."""
    import json

    out = data / f"counts-{tree.name}.jsonl"
    env = _env(slack, model, data / tree.name)
    (data / tree.name).mkdir()
    daemon = await _spawn([str(HERE), "--counted-daemon", str(out), str(tree)], env, data / tree.name, "daemon")
    try:
        await slack.wait_connected(60, total=len(slack.connections) + 1)
        await warm_up(slack)
        snaps: list[dict[str, Any]] = []

        async def snap() -> dict[str, Any]:
            daemon.send_signal(signal.SIGUSR1)

            def written() -> str | None:
                text = out.read_text() if out.exists() else ""
                return text if text.count("\n") > len(snaps) else None

            snaps.append(json.loads((await slack.wait_for(written, 10, "a snapshot")).splitlines()[len(snaps)]))
            return snaps[-1]

        await snap()
        windows = []
        for window in ("plain", "profiled"):  # the second snapshot starts the profiler, the third stops it
            before, calls, requests = snaps[-1], len(slack.calls), len(model.requests)
            await tool_turns(slack, f"{window}-{tree.name}")
            after = await snap()
            figures = {k: (after[k] - before[k]) / TURN_THREADS for k in ("hops", "statements", "commits")}
            for k in ("loop_cpu", "store_cpu", "process_cpu"):
                figures[k] = (after[k] - before[k]) * 1000 / TURN_THREADS
            figures["slack_calls"] = (len(slack.calls) - calls) / TURN_THREADS
            figures["model_requests"] = (len(model.requests) - requests) / TURN_THREADS
            figures["split"] = after.get("split")
            kinds = {k: (n - before["kinds"].get(k, 0)) / TURN_THREADS for k, n in after["kinds"].items()}
            figures["kinds"] = {k: n for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]) if n}
            windows.append(figures)
    except BaseException:
        print(f"daemon log (tail):\n{(data / tree.name / 'daemon.log').read_text(errors='replace')[-4000:]}")
        raise
    finally:
        await _stop(daemon)
    await slack.wait_for(lambda: not slack.open_connections, 10, "the daemon gone")
    return {"plain": windows[0], "profiled": windows[1]}


async def tool_turns(slack: FakeSlack, tag: str) -> None:
    """TURN_THREADS mentions across TURN_CHANNELS channels, 100 a second; until every thread has its answer."""
    roots: list[tuple[str, str]] = []
    for i in range(TURN_THREADS):
        channel = f"CTURN{i % TURN_CHANNELS}"
        event = slack.mention(channel, f"tool-turn {tag} {i}")
        await slack.send_event(event)
        roots.append((channel, event["ts"]))
        await asyncio.sleep(0.01)

    def all_answered() -> bool:
        return all(any("is done" in m.text for m in slack.posts_in_thread(c, ts)) for c, ts in roots)

    await slack.wait_for(all_answered, 120, "every tool turn answered")


def report_turn_cost(label: str, figures: dict[str, Any]) -> None:
    plain, split = figures["plain"], figures["profiled"]["split"]
    other = plain["process_cpu"] - plain["loop_cpu"] - plain["store_cpu"]
    print(f"    {label}")
    print(f"      CPU per turn {plain['process_cpu']:6.2f} ms: loop thread {plain['loop_cpu']:5.2f}", end="")
    print(f", store thread {plain['store_cpu']:5.2f}, other threads {other:5.2f}")
    total = sum(split.values()) or 1.0
    parts = ", ".join(f"{name} {plain['loop_cpu'] * share / total:4.2f}" for name, share in split.items())
    print(f"      loop thread by package (ms, profiled window's shares): {parts}")
    print(
        f"      per turn: {plain['hops']:5.1f} hops to the store thread, {plain['statements']:5.1f} statements,", end=""
    )
    print(f" {plain['commits']:4.1f} commits, {plain['slack_calls']:4.1f} Slack calls,", end="")
    print(f" {plain['model_requests']:3.1f} model requests")
    if os.environ.get("BENCH_STATEMENTS"):
        for kind, n in plain["kinds"].items():
            print(f"        {n:5.2f}× {kind}")


# --- (e) a burst of mentions ---------------------------------------------------------------------------------------


async def burst(slack: FakeSlack, model: FakeAnthropic, tree: Path, data: Path) -> tuple[list[float], list[float]]:
    """BURST_MENTIONS mentions on schedule at BURST_RATE_PER_S on a daemon from `tree`: each ack's latency, and
    each mention's seconds until the model was first asked about it."""
    loop = asyncio.get_running_loop()
    home = data / f"burst-{tree.name}"
    home.mkdir()
    env = _env(slack, model, home) | {"PYTHONPATH": str(tree)}
    profile = ["-m", "cProfile", "-o", os.environ["BENCH_PROFILE"]] if os.environ.get("BENCH_PROFILE") else []
    daemon = await _spawn([*profile, "-m", "bot", "run"], env, home, "daemon")
    asked: dict[str, float] = {}
    previous = model.default

    def script(request: dict[str, Any]) -> Reply:
        found = re.search(r"\bburst (\d+)\b", " ".join(user_texts(request)))
        if found is None:
            return previous(request) if callable(previous) else Reply.text_only("ok")
        asked.setdefault(found.group(1), loop.time())
        return Reply.text_only("Heard.")

    model.default = script
    try:
        await slack.wait_connected(60, total=len(slack.connections) + 1)
        await warm_up(slack)
        sent: dict[str, tuple[str, float]] = {}  # mention number -> (envelope, when sent)
        start = loop.time()
        for i in range(BURST_MENTIONS):
            delay = start + i / BURST_RATE_PER_S - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            event = slack.mention(f"CBURST{i % 10}", f"burst {i}")
            sent[str(i)] = (await slack.send_event(event), loop.time())
        await slack.wait_for(lambda: all(e in slack.acks for e, _ in sent.values()), 120, "every ack")
        await slack.wait_for(lambda: len(asked) >= BURST_MENTIONS, 600, "every mention's first model request")
        at = {e.envelope_id: e.time for e in slack.envelopes}
        acks = [slack.acks[e].time - at[e] for e, _ in sent.values()]
        return acks, [asked[i] - when for i, (_, when) in sent.items()]
    except BaseException:
        print(f"daemon log (tail):\n{(home / 'daemon.log').read_text(errors='replace')[-4000:]}")
        raise
    finally:
        model.default = previous
        await _stop(daemon)
        await slack.wait_for(lambda: not slack.open_connections, 10, "the daemon gone")


def report_burst(label: str, acks: list[float], first: list[float]) -> None:
    print(f"    {label}")
    print(f"      ack p50 {ms(pct(acks, 50))}   p99 {ms(pct(acks, 99))}   max {ms(max(acks))}", end="")
    print(f"   -> {verdict(pct(acks, 99) <= 0.020)} (p99 ≤ 20 ms)")
    print(f"      mention → first model request p50 {pct(first, 50):6.2f} s   p99 {pct(first, 99):6.2f} s", end="")
    print(f"   -> {verdict(pct(first, 50) <= 1.5)} (p50 ≤ 1.5 s)")


# --- main ------------------------------------------------------------------------------------------------------


async def main(parts: str = "abc") -> None:
    print(f"threadbot Slack benchmark ({os.cpu_count()} CPUs, Python {sys.version.split()[0]})\n")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        async with FakeSlack() as slack, FakeAnthropic(default=fan_out_script()) as model:
            if set(parts) & set("abc"):
                await edge_figures(slack, model, data, parts)
            if "d" in parts:
                print(f"(d) daemon CPU per tool turn, {TURN_THREADS} threads × one {TURN_SLEEP_S} s sleep_for (≤ 6 ms)")
                report_turn_cost(f"threadbot, this tree ({ROOT})", await turn_cost(slack, model, ROOT, data))
                if await asyncio.to_thread(BASELINE_TREE.exists):
                    report_turn_cost(f"baseline ({BASELINE_TREE})", await turn_cost(slack, model, BASELINE_TREE, data))
                else:
                    print(f"    (no baseline tree at {BASELINE_TREE}: git worktree add {BASELINE_TREE} 45f8fd7)")
            if "e" in parts:
                print(f"(e) a burst: {BURST_MENTIONS} mentions at {BURST_RATE_PER_S}/s over 10 channels")
                report_burst(f"threadbot, this tree ({ROOT})", *await burst(slack, model, ROOT, data))
                if await asyncio.to_thread(BASELINE_TREE.exists):
                    report_burst(f"baseline ({BASELINE_TREE})", *await burst(slack, model, BASELINE_TREE, data))


async def edge_figures(slack: FakeSlack, model: FakeAnthropic, data: Path, parts: str) -> None:
    """Parts (a) to (c): the bolt baseline, then one daemon for all three."""
    env = _env(slack, model, data)
    if "a" in parts:
        baseline = await _spawn([str(HERE), "--baseline-app"], env, data, "baseline")
        try:
            await slack.wait_connected(30)
            base = await ack_latencies(slack, "CBASE", with_mentions=False)
        finally:
            await _stop(baseline)
        await slack.wait_for(lambda: not slack.open_connections, 10, "the baseline gone")

    profile = ["-m", "cProfile", "-o", os.environ["BENCH_PROFILE"]] if os.environ.get("BENCH_PROFILE") else []
    daemon = await _spawn([*profile, "-m", "bot", "run"], env, data, "daemon")
    try:
        await slack.wait_connected(60, total=len(slack.connections) + 1)
        await warm_up(slack)
        if "a" in parts:
            report_acks(base, await ack_latencies(slack, "CACK", with_mentions=True))
        if "b" in parts:
            report_cancels(*await cancel_latencies(slack, model))
        if "c" in parts:
            report_budget(await edit_budget(slack, model))
    except BaseException:
        print("daemon log (tail):\n" + (data / "daemon.log").read_text(errors="replace")[-4000:])
        raise
    finally:
        await _stop(daemon)
    await slack.wait_for(lambda: not slack.open_connections, 10, "the daemon gone")
    if daemon.returncode not in (0, None):
        print(f"\n(the daemon exited with {daemon.returncode}; its log follows)")
        print((data / "daemon.log").read_text(errors="replace")[-3000:])


def report_acks(base: list[float], ours: list[float]) -> None:
    print(f"(a) event-to-ack latency, {RATE_PER_S} events/s for {ACK_SECONDS} s ({len(ours)} events)")
    print(f"    baseline (bolt, no-op listeners): p50 {ms(pct(base, 50))}   p99 {ms(pct(base, 99))}")
    print(f"    threadbot (1 in {MENTION_EVERY} a mention): p50 {ms(pct(ours, 50))}   p99 {ms(pct(ours, 99))}", end="")
    print(f"   max {ms(max(ours))}   -> {verdict(pct(ours, 99) <= 0.020)} (p99 ≤ 20 ms)\n")


def report_cancels(to_model: list[float], to_status: list[float]) -> None:
    model_p99, status_p99 = pct(to_model, 99), pct(to_status, 99)
    print(f"(b) reaction-to-cancelled latency ({len(to_model)} cancels, one sleep_for each)")
    print(f"    until the model gets the cancelled result: p50 {ms(pct(to_model, 50))}   p99 {ms(model_p99)}", end="")
    print(f"   -> {verdict(model_p99 <= 0.150)} (p99 ≤ 150 ms)")
    print(f"    until the status message shows 🚫:        p50 {ms(pct(to_status, 50))}   p99 {ms(status_p99)}")
    print(f"    (that edit waits its turn in the shared 50/min budget; mean {statistics.mean(to_status):.2f} s)\n")


def report_budget(figures: dict[str, float]) -> None:
    total = FANOUT_THREADS * CALLS_PER_THREAD
    lost = figures["status_lost"] + figures["answers_lost"]
    print(f"(c) {total} concurrent sleep_for calls in {FANOUT_THREADS} threads, chat.update limited to 50/min by Slack")
    print(f"    chat.update calls: {figures['updates']:.0f}   429s: {figures['rate_limited']:.0f}")
    print(f"    final states lost: {figures['status_lost']:.0f} status messages, ", end="")
    print(f"{figures['answers_lost']:.0f} answers   -> {verdict(lost == 0)} (0 lost)")
    print(f"    the last final landed {figures['finals_after_s']:.1f} s after the last call ended", end="")
    print(f" ({figures['total_s']:.1f} s in all)")


if __name__ == "__main__":
    if sys.argv[1:] == ["--baseline-app"]:
        baseline_app()
    elif sys.argv[1:2] == ["--counted-daemon"]:
        counted_daemon(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "abcde"))
