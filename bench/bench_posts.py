"""Posting under Slack's per-channel post limit: who answers first, and how many 429s it takes.

Run: `.venv/bin/python bench/bench_posts.py [pd]` (about seven minutes; `p` or `d` runs one part). Prints figures;
asserts nothing.

(p) the posting alone, in this process, for three posters;
(d) the whole daemon, twice at once: this tree's and `BASELINE`'s (`git archive` into a temporary folder), each
    against its own fakes with the same post limit.

The fake Slack limits `chat.postMessage` as Slack does (about one post a second per channel, bursts of 10, then
429 + `Retry-After` in whole seconds), in real time: Retry-After cannot be scaled, so neither is anything else.
Three posters run side by side in the same run, same fake, each in channels of its own (the limit is per channel):
- `before`: threadbot's queue before it paced from Slack's answers (the `PostQueue` of commit `BASELINE`, read
  from git): bursts of 3 at 1/s, one queue per channel in arrival order;
- `peer`: the naive poster peers use: every post sent at once, and on a 429 sent again after `Retry-After`;
- `now`: today's `PostQueue`: Slack's burst, a channel paused and slowed only when Slack refuses, and answers
  ahead of progress.
Each posts what threadbot's edge posts for a thread, in the same order (a thread's posts go one after another):
- mentions: 100 mentions at 200/s, each answered after a model latency of 0.2-0.6 s: one answer post;
- tool turns: 100 mentions at 200/s, each starting a 10 s tool call: its status message (progress), then when the
  call has ended and the model spoke again, the answer.
Each runs with all 100 threads in one channel, and spread over 10 channels. Figures: when the answers had all
landed (and the median) after the first mention; for tool turns also after the work ended (the tool's end plus
the model's latency); and the 429s Slack answered that poster. 100 posts in one channel cannot all land sooner
than ~90 s after the first (10 at once, then 1 a second), 200 not sooner than ~190 s.

In (d) each daemon gets, at 200 mentions a second, 100 mentions answered at once ("ok") in one channel and 100
mentions that each run `sleep_for(10)` in another; the figures are the same, from the fake's own records.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(HERE.parent)]

from fakes.anthropic_api import FakeAnthropic, Reply, tool_use, user_texts  # noqa: E402
from fakes.slack_api import FakeSlack  # noqa: E402
from support import CallFeed, pct  # noqa: E402

from bot.errors import SlackRateLimited  # noqa: E402
from bot.slack.client import SlackClient  # noqa: E402
from bot.slack.posts import PostQueue, Priority  # noqa: E402

BASELINE = "927cb57"  # the integration branch before posts paced from Slack's answers
THREADS = 100
MENTIONS_PER_S = 200.0
TOOL_S = 10.0
SLACK_BURST = 10


class Poster(Protocol):
    async def post(self, channel: str, text: str, *, progress: bool) -> None: ...


class Before:
    """The old `PostQueue`, as it was: it knows no priority."""

    def __init__(self, client: SlackClient) -> None:
        self._queue: Any = _old_post_queue()(client)

    async def post(self, channel: str, text: str, *, progress: bool) -> None:
        await self._queue.post(channel=channel, text=text)


class Peer:
    """Burst and retry: every post goes at once; a 429 is waited out and the post tried again."""

    def __init__(self, client: SlackClient) -> None:
        self._client = client

    async def post(self, channel: str, text: str, *, progress: bool) -> None:
        while True:
            try:
                await self._client.chat_postMessage(channel=channel, text=text)
                return
            except SlackRateLimited as exc:
                await asyncio.sleep(exc.retry_after_s)


class Now:
    def __init__(self, client: SlackClient) -> None:
        self._queue = PostQueue(client)

    async def post(self, channel: str, text: str, *, progress: bool) -> None:
        priority = Priority.PROGRESS if progress else Priority.ANSWER
        await self._queue.post(channel=channel, text=text, priority=priority)


def _old_post_queue() -> type:
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{BASELINE}:bot/slack/posts.py"], capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType("bench_posts_before")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{BASELINE}:bot/slack/posts.py", "exec"), module.__dict__)
    return module.PostQueue  # type: ignore[no-any-return]


@dataclass
class Run:
    poster: str
    scenario: str
    channels: list[str]
    answered: list[float] = field(default_factory=list)  # s after the first mention
    after_work: list[float] = field(default_factory=list)  # s after the work ended (tool turns)


async def thread(poster: Poster, run: Run, i: int, start: float, tool: bool, rng: random.Random) -> None:
    """One thread's posts, one after another as its session queue sends them."""
    channel = run.channels[i % len(run.channels)]
    latency = rng.uniform(0.2, 0.6)
    await asyncio.sleep(max(0.0, start + i / MENTIONS_PER_S + latency - time.perf_counter()))
    work_done = time.perf_counter()
    if tool:
        work_done += TOOL_S + rng.uniform(0.2, 0.6)  # the call runs from now, whatever its status post does
        await poster.post(channel, f"⏳ sleep_for — thread {i}", progress=True)
        await asyncio.sleep(max(0.0, work_done - time.perf_counter()))
    await poster.post(channel, f"The answer of thread {i}.", progress=False)
    landed = time.perf_counter()
    run.answered.append(landed - start)
    run.after_work.append(landed - work_done)


async def posters_side_by_side() -> None:
    async with FakeSlack() as slack:
        slack.limit_posts_like_slack(burst=SLACK_BURST)
        client = SlackClient(token="xoxb-bench", base_url=slack.api_url)
        posters: dict[str, Poster] = {"before": Before(client), "peer": Peer(client), "now": Now(client)}
        runs: list[tuple[Run, bool]] = []
        for name in posters:
            for scenario, tool in (("mentions", False), ("10 s tool turns", True)):
                for spread in (1, 10):
                    channels = [f"C{name}-{scenario[:2]}-{spread}-{c}" for c in range(spread)]
                    label = f"{scenario}, {'1 channel' if spread == 1 else f'{spread} channels'}"
                    runs.append((Run(name, label, channels), tool))
        print(
            f"(p) {len(runs)} runs side by side: {THREADS} threads each, Slack's post limit 1/s per channel, burst 10"
        )
        start = time.perf_counter()
        await asyncio.gather(
            *(
                thread(posters[run.poster], run, i, start, tool, random.Random(i))
                for run, tool in runs
                for i in range(THREADS)
            )
        )
        print(f"(all done after {time.perf_counter() - start:.0f} s)\n")
        refused: dict[str, int] = {}
        for call in slack.calls_to("chat.postMessage"):
            if call.status == 429:
                refused[call.params["channel"]] = refused.get(call.params["channel"], 0) + 1
        report([run for run, _ in runs], refused)


def report(runs: list[Run], refused: dict[str, int]) -> None:
    scenarios = list(dict.fromkeys(run.scenario for run in runs))
    header = f"  {'poster':<8} {'all answered':>13} {'p50':>7} {'after work, p50/max':>21} {'429s':>6}"
    for scenario in scenarios:
        print(f"{scenario}:")
        print(header)
        for run in (r for r in runs if r.scenario == scenario):
            taken = sum(refused.get(channel, 0) for channel in run.channels)
            after = "" if not run.after_work else f"{pct(run.after_work, 50):.1f} / {max(run.after_work):.1f} s"
            print(
                f"  {run.poster:<8} {max(run.answered):>11.1f} s {pct(run.answered, 50):>5.1f} s {after:>21} {taken:>6}"
            )
        print()


# --- (d) the daemons --------------------------------------------------------------------------------------------


def script(request: dict[str, Any]) -> Reply:
    tool = ">tool " in (user_texts(request) or [""])[0]  # the request, as the daemon quotes it
    if tool and len(request["messages"]) == 1:
        return Reply.tools(tool_use("sleep_for", {"seconds": TOOL_S}))
    return Reply.text_only("slept" if tool else "ok")


async def daemon_run(name: str, source: Path, data: Path, refused: dict[str, int]) -> list[Run]:
    """One daemon against fakes of its own: 100 mentions answered at once in C1, 100 tool turns in C2; the 429s
    of each channel go into `refused`."""
    async with FakeSlack() as slack, FakeAnthropic(default=script) as model:
        slack.limit_posts_like_slack(burst=SLACK_BURST)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BOT_", "SLACK_", "ANTHROPIC_", "OTEL_"))}
        env.update(
            PYTHONPATH=str(source),
            SLACK_API_URL=slack.api_url,
            SLACK_BOT_TOKEN="xoxb-bench",
            SLACK_APP_TOKEN="xapp-bench",
            ANTHROPIC_BASE_URL=model.url,
            ANTHROPIC_API_KEY="bench",
            BOT_DATA_DIR=str(data),
            BOT_MAX_CONCURRENT_TOOLS="256",
        )
        with (data / "daemon.log").open("wb") as log:
            daemon = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "run", cwd=data, env=env, stdout=log, stderr=log
            )
        try:
            await slack.wait_connected(60)
            warm = slack.mention("CWARM", "warm up")
            await slack.wait_ack(await slack.send_event(warm), 30)
            await slack.wait_for(lambda: slack.posts_in_thread("CWARM", warm["ts"]), 60, "the warm-up answer")
            runs = {
                "C1": Run(name, "daemon: mentions, 1 channel", [f"{name}/C1"]),
                "C2": Run(name, "daemon: 10 s tool turns, 1 channel", [f"{name}/C2"]),
            }
            roots: dict[tuple[str, str], str] = {}
            start = time.perf_counter()
            for i in range(THREADS):
                for channel, words in (("C1", f"hello {i}"), ("C2", f"tool {i}")):
                    event = slack.mention(channel, words)
                    await slack.wait_ack(await slack.send_event(event), 30)
                    roots[(channel, event["ts"])] = "slept" if channel == "C2" else "ok"
                await asyncio.sleep(max(0.0, start + (i + 1) / MENTIONS_PER_S - time.perf_counter()))
            landed: dict[tuple[str, str], float] = {}
            feed = CallFeed(slack)

            def answered() -> bool:
                """Reads only the calls since it last looked (the fake shares this process with the daemons' load)."""
                for call in feed.new():
                    channel = call.params.get("channel")
                    if call.ok and call.method in ("chat.postMessage", "chat.update") and channel in runs:
                        message = slack.message(channel, call.response["ts"])
                        if roots.get((channel, message.thread_root)) == message.text:
                            landed.setdefault((channel, message.thread_root), call.time)
                return len(landed) == len(roots)

            await slack.wait_for(answered, 600, f"every answer of the {name} daemon")
            for (channel, _), at in landed.items():
                runs[channel].answered.append(at - start)
            posts = sum(c.ok and c.params.get("channel") in runs for c in slack.calls_to("chat.postMessage"))
            print(f"  {name}: {posts / len(roots):.1f} posts a thread")
            for channel in runs:
                refused[f"{name}/{channel}"] = sum(
                    c.status == 429 for c in slack.calls_to("chat.postMessage") if c.params.get("channel") == channel
                )
            return list(runs.values())
        except BaseException:
            print(f"{name} daemon log (tail):\n" + (data / "daemon.log").read_text(errors="replace")[-3000:])
            raise
        finally:
            if daemon.returncode is None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(daemon.wait(), 30)
                except TimeoutError:
                    daemon.kill()
                    await daemon.wait()


def check_out_before(folder: Path) -> None:
    folder.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BASELINE], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)


async def daemons_side_by_side() -> None:
    print(
        f"(d) two daemons at once, each {THREADS} mentions + {THREADS} tool turns, post limit 1/s a channel, burst 10"
    )
    refused: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        await asyncio.to_thread(check_out_before, folder / "before")
        (folder / "data-before").mkdir()
        (folder / "data-now").mkdir()
        results = await asyncio.gather(
            daemon_run("before", folder / "before", folder / "data-before", refused),
            daemon_run("now", ROOT, folder / "data-now", refused),
        )
    print()
    report([run for result in results for run in result], refused)


async def main(parts: str) -> None:
    if "p" in parts:
        await posters_side_by_side()
    if "d" in parts:
        await daemons_side_by_side()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "pd"))
