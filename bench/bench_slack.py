"""Slack edge benchmark: ack latency, cancel latency, and the edit budget under load, against the fake Slack.

Run: `.venv/bin/python bench/bench_slack.py [abc]` (about two minutes; name parts to run only those).
Prints figures; asserts nothing. Targets from issue 4:
(a) event-to-ack latency at 200 events/s, p50/p99 (target p99 ≤ 20 ms). The daemon gets a realistic mix:
    channel chatter it must look up and ignore, and every tenth event a mention that starts a turn.
    Baseline, measured in the same run: a bare bolt app whose listeners do nothing, same fake, same rate.
(b) reaction-to-cancelled latency, p99 (target ≤ 150 ms): a cancel reaction on a status message until the
    model receives the `cancelled` tool result (the call is final and the turn has moved on, an upper
    bound); also until the status message shows 🚫 (that edit waits its turn in the edit budget).
(c) 200 concurrent sleep_for calls across 50 threads with chat.update limited to 50 a minute by the fake:
    the number of 429s and of final states lost (target 0 lost).
One warm-up turn runs before measuring (the first model request builds the anthropic SDK's lazy parts, a
one-time ~0.1 s stall). Both daemons are real processes on Socket Mode (`python -m bot run`, and this file
with `--baseline-app`); the fakes run in this process, so their own overhead is in both figures of (a).
`BENCH_PROFILE=/tmp/daemon.prof` runs the daemon under cProfile.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import sys
import tempfile
import time
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


# --- main ------------------------------------------------------------------------------------------------------


async def main(parts: str = "abc") -> None:
    print(f"threadbot Slack benchmark ({os.cpu_count()} CPUs, Python {sys.version.split()[0]})\n")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        async with FakeSlack() as slack, FakeAnthropic(default=fan_out_script()) as model:
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
    else:
        asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "abc"))
