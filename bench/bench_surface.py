"""Slack surfaces side by side: classic mode against agent mode, one tool turn and many at once.

Run: `.venv/bin/python bench/bench_surface.py [--turns 5] [--sizes 10,100] [--modes classic,agent] [--channels 1,10]
[--parts 12]`
(about 5 minutes with the defaults on 2 cores, most of it classic mode's 100 threads in one channel). Prints
figures; asserts nothing.

Every daemon is a real `python -m bot run` (Socket Mode) against a fake Slack of its own that limits what Slack
limits, in real time: `chat.postMessage` about 1/s per channel with bursts of 10, `chat.update` Tier 3 (50 a
minute), `chat.startStream` / `chat.stopStream` Tier 2 (20 a minute) and `chat.appendStream` Tier 4, the agent
methods at their tiers (all per workspace but posts), each answering 429 + `Retry-After` beyond. Nothing is
time-scaled: the daemon paces itself by Slack's real limits (its post, edit and stream budgets are not
configurable), so a faster fake would change nothing but the 429s.

(1) Per tool turn: for each mode in turn, `turns` mentions in one channel, each a tool turn: the model says a
    few words, calls `sleep_for` for 3 s, then answers. Counted from the fake Slack: posts (`chat.postMessage`),
    edits (`chat.update`) and stream calls per turn, the messages each thread ends with, and how long after the
    call ended (taken as the model's next request, which follows the call's end by a few milliseconds) its final
    state was visible. Agent mode is measured twice: with a stream that lives through the turn, and with Slack
    ending every stream after 1.5 s (the stream limit, in seconds instead of five minutes), where the message is
    kept by `chat.update`.
(2) Concurrent threads: for each size N, a daemon for each mode and spread (N threads in 1 channel, or over 10),
    all at once (eight with the defaults), each sent N mentions at once, each a tool turn of `sleep_for` 1 s.
    Per thread, after its work ended (the call's end, as above): when its answer was visible, when its call's
    final state was; finals lost (a thread whose call never showed as done within the wait's bound, 120 s + 6 s a
    thread), and the 429s Slack answered that daemon (any method, named below the table). The daemons share the
    machine's 2 cores; each has its own workspace, so its own limits. 1,000 threads take classic mode about 50
    minutes in one channel (1 post a second), agent mode about 2 over ten channels:
    `--sizes 1000 --modes agent --channels 10` measures one at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(HERE.parent)]

from daemon_rig import Daemon, mention, status_posts  # noqa: E402
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use, user_texts  # noqa: E402
from fakes.slack_api import FakeSlack, StoredMessage  # noqa: E402
from fakes.slack_streams import task_cards  # noqa: E402
from support import CallFeed, pct  # noqa: E402

METHODS = ("chat.postMessage", "chat.update", "chat.startStream", "chat.appendStream", "chat.stopStream")
ANSWER = "Rested"
JOB = re.compile(r"job-(\d+)")
EDIT_TIER_PER_MINUTE = 50  # chat.update, Tier 3


def limit_like_slack(slack: FakeSlack) -> None:
    slack.limit_posts_like_slack(burst=10)
    slack.rate_limit("chat.update", per_minute=EDIT_TIER_PER_MINUTE)
    slack.streams.limit_like_slack()
    slack.agent.limit_like_slack()


def _done(revision_text: str, blocks: list[dict[str, Any]] | None, agent: bool) -> bool:
    """The call shows as done: its task card complete (agent mode), its status line ✅ (classic mode)."""
    if agent:
        return any(status == "complete" for _, status, _ in task_cards(blocks))
    return "✅" in revision_text


def _first(posts: list[StoredMessage], seen: Callable[[str, list[dict[str, Any]] | None], bool]) -> float | None:
    """When any of the thread's messages first showed what `seen(text, blocks)` looks for (fake's clock)."""
    times = [r.time for m in posts for r in m.history if seen(r.text, r.blocks)]
    return min(times) if times else None


@dataclass
class Run:
    """One daemon's threads: where each went, when its call ended, what Slack was asked."""

    mode: str
    channels: list[str]
    threads: int
    sleep_s: float
    stream_limit_s: float | None = None
    roots: dict[str, tuple[str, int]] = field(default_factory=dict)  # thread ts -> (channel, job)
    call_end: dict[int, float] = field(default_factory=dict)  # job -> the model's next request
    answer_lags: list[float] = field(default_factory=list)
    final_lags: list[float] = field(default_factory=list)
    lost: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # the 429s Slack answered, by method
    figures: dict[str, float] = field(default_factory=dict)

    @property
    def spread(self) -> str:
        return f"{len(self.channels)} channel" + ("s" if len(self.channels) > 1 else "")

    @property
    def agent(self) -> bool:
        return self.mode == "agent"

    def script(self, request: dict[str, Any]) -> Reply:
        job = int(JOB.search(user_texts(request)[0])[1])  # type: ignore[index]
        if len([m for m in request["messages"] if m["role"] == "assistant"]) == 0:
            return Reply.tools(tool_use("sleep_for", {"seconds": self.sleep_s}), text="Let me sleep on it.")
        self.call_end.setdefault(job, time.perf_counter())
        return Reply.text_only(f"{ANSWER}: job-{job}")


async def drive(run: Run) -> Run:
    """One daemon against fakes of its own, sent `run.threads` mentions at once; fills in `run`."""
    async with FakeSlack() as slack, FakeAnthropic(default=run.script) as model:
        limit_like_slack(slack)
        if run.stream_limit_s is not None:
            slack.streams.limit_s = run.stream_limit_s
        with tempfile.TemporaryDirectory() as data:
            env = {
                "BOT_SLACK_SURFACE": run.mode,
                "BOT_MAX_CONCURRENT_TOOLS": str(max(16, run.threads)),
                "BOT_MAX_CONCURRENT_TOOLS_PER_USER": str(max(8, run.threads)),
                # Slack's edit budget, not the suite's (daemon_rig lets test daemons edit at 600 a minute).
                "BOT_SLACK_EDITS_PER_MINUTE": "50",
            }
            daemon = Daemon(slack, model, Path(data), env=env)
            await daemon.start()
            try:
                await daemon.connected()
                before = {method: len(slack.calls_to(method)) for method in METHODS}
                feed = CallFeed(slack)
                for job in range(run.threads):
                    channel = run.channels[job % len(run.channels)]
                    event = await mention(slack, channel, f"job-{job}: sleep on it")
                    run.roots[event["ts"]] = (channel, job)
                answered: set[str] = set()
                finished: set[str] = set()

                def settled() -> bool:
                    """Reads only the calls since it last looked (four daemons load the fakes' event loop)."""
                    for call in feed.new():
                        if not (call.ok and call.method in METHODS and "ts" in call.response):
                            continue
                        message = slack.message(
                            call.params.get("channel") or call.response["channel"], call.response["ts"]
                        )
                        root = message.thread_root
                        if root in run.roots:
                            if ANSWER in message.text:
                                answered.add(root)
                            if _done(message.text, message.blocks, run.agent):
                                finished.add(root)
                    return len(answered) == len(finished) == len(run.roots)

                bound_s = 120 + 6 * run.threads  # Tier 2 starts and stops: ~3 s a thread, and a margin
                with contextlib.suppress(TimeoutError):  # what never showed is counted as lost below
                    await slack.wait_for(lambda: settled() or None, bound_s, "every answer and final state")
                await asyncio.sleep(3)  # a benchmark may wait: late edits land before counting
                measure(run, slack, before)
            finally:
                await daemon.stop()
    return run


def measure(run: Run, slack: FakeSlack, before: dict[str, int]) -> None:
    """Per thread, from the fake's revisions: when its answer and its call's final state first showed."""
    for root, (channel, job) in run.roots.items():
        posts = slack.posts_in_thread(channel, root)
        answer = _first(posts, lambda text, blocks: ANSWER in text)
        final = _first(posts, lambda text, blocks: _done(text, blocks, run.agent))
        ended = run.call_end.get(job)
        if final is None or ended is None:
            run.lost += 1
            continue
        run.final_lags.append(final - ended)
        if answer is not None:
            run.answer_lags.append(answer - ended)
    run.refused = Counter({method: n for method, n in slack.rate_limited.items() if n})
    turns = len(run.roots)
    run.figures = {method: (len(slack.calls_to(method)) - before[method]) / turns for method in METHODS}
    roots = list(run.roots.items())
    run.figures["messages per turn"] = statistics.mean(len(slack.posts_in_thread(c, r)) for r, (c, _) in roots)
    run.figures["status messages per turn"] = statistics.mean(len(status_posts(slack, c, r)) for r, (c, _) in roots)


def per_turn_figures(run: Run) -> dict[str, float]:
    lags = run.final_lags or [float("nan")]
    return {
        **run.figures,
        "final visible after call, ms p50": pct(lags, 50) * 1000,
        "final visible after call, ms p99": pct(lags, 99) * 1000,
        "finals lost": run.lost,
        "Slack 429s": run.refused.total(),
    }


async def per_turn(turns: int) -> None:
    rows = {
        "classic": await drive(Run("classic", ["C1"], turns, 3)),
        "agent": await drive(Run("agent", ["C1"], turns, 3)),
        "agent, stream ends at 1.5 s": await drive(Run("agent", ["C1"], turns, 3, stream_limit_s=1.5)),
    }
    figures = {mode: per_turn_figures(r) for mode, r in rows.items()}
    print(f"(1) per tool turn ({turns} turns in one channel, sleep_for 3 s each, one daemon at a time)")
    print(f"{'':34}" + "".join(f"{mode:>30}" for mode in rows))
    for name in next(iter(figures.values())):
        print(f"{name:34}" + "".join(f"{figures[mode][name]:>30.1f}" for mode in rows))
    print()


def _lags(values: list[float]) -> str:
    if not values:
        return f"{'-':>17}"
    return f"{pct(values, 50):7.1f} / {pct(values, 99):7.1f}"


def spread(channels: int) -> list[str]:
    return ["C1"] if channels == 1 else [f"C{c:02d}" for c in range(channels)]


async def concurrent(sizes: list[int], modes: list[str], spreads: list[int]) -> None:
    """Every size, spread and mode at once: the run takes as long as its slowest daemon."""
    runs = [Run(mode, spread(channels), size, 1) for size in sizes for channels in spreads for mode in modes]
    started = time.perf_counter()
    await asyncio.gather(*(drive(r) for r in runs))
    print(
        f"(2) threads at once, a tool turn each (sleep_for 1 s); {len(runs)} daemons side by side, "
        f"{time.perf_counter() - started:.0f} s"
    )
    print(
        f"  {'threads':>7}  {'':12} {'mode':<8} {'answer visible, s p50 / p99':>28} {'final visible, s p50 / p99':>28}"
        f" {'finals lost':>12} {'429s':>6} {'posts':>6} {'edits':>6} {'streams':>8}"
    )
    for r in runs:
        streams = sum(r.figures[m] for m in METHODS if "Stream" in m)
        print(
            f"  {r.threads:>7}  {r.spread:<12} {r.mode:<8} {_lags(r.answer_lags):>28} {_lags(r.final_lags):>28}"
            f" {r.lost:>12} {r.refused.total():>6} {r.figures['chat.postMessage']:>6.1f}"
            f" {r.figures['chat.update']:>6.1f} {streams:>8.1f}"
        )
    print("  (seconds after the thread's work ended; posts, edits and stream calls per turn)")
    for r in runs:
        if r.refused:
            print(
                f"  429s of {r.threads}, {r.spread}, {r.mode}: " + ", ".join(f"{m} {n}" for m, n in r.refused.items())
            )
    print()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5, help="tool turns of part (1)")
    parser.add_argument(
        "--sizes", default="10,100", help="concurrent threads of part (2), comma-separated (1000 takes about an hour)"
    )
    parser.add_argument("--modes", default="classic,agent", help="the modes of part (2)")
    parser.add_argument("--channels", default="1,10", help="the spreads of part (2): threads over this many channels")
    parser.add_argument("--parts", default="12", help="which parts to run")
    args = parser.parse_args()
    if "1" in args.parts:
        await per_turn(args.turns)
    if "2" in args.parts:
        spreads = [int(c) for c in args.channels.split(",")]
        await concurrent([int(s) for s in args.sizes.split(",")], args.modes.split(","), spreads)


if __name__ == "__main__":
    asyncio.run(main())
