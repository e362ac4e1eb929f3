"""Chaos soak: one daemon as a process, killed with SIGKILL at random moments while Slack throttles and fails.

Run: `.venv/bin/python bench/bench_chaos.py [--seconds 120] [--seed 1] [--threads 20] [--rate 1.0]`
(the default takes about three minutes). The seed draws the messages, kills and storms; where they land
depends on how fast the daemon answers, so two runs of one seed give close figures, not the same ones.

What it does, against the fakes in tests/fakes/ (a real `python -m bot run`, tests/daemon_rig.py's `Daemon`):
- messages at about `--rate` a second over `--threads` threads, each thread one message at a time (the next
  once the last is answered, so every message is its own turn): most ask for a plain answer, others for a
  tool call (`sleep_for`), a call that is then cancelled with ❌ on its status message, a reminder, a wait,
  a model that answers 529 first, or a stream that hangs (the turn ends with its one "Model error" line);
- Slack as Slack is: about one post a second per channel (429 with Retry-After beyond it), and storms every
  so often: for a few seconds a share of chat.* calls answer 500 or 429 with Retry-After;
- a `kill -9` every 30–60 s, then a restart on the same data dir.

At the end (the traffic stopped, everything given time to arrive, a clean stop) it checks and prints: every
message answered exactly once in the fake Slack, every reminder posted once, every wait woken once, and the
counts. Exit status 1 when a check fails.

The load generator (`world`, `load`, `thread_worker`, the model's `responder`) and the checks (`report`) are
also bench_soak.py's, which runs the same traffic for twenty minutes with one graceful restart and watches the
daemon's resources instead of killing it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import random
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from daemon_rig import Daemon  # noqa: E402
from fakes.anthropic_api import Failure, FakeAnthropic, Reply, tool_use  # noqa: E402
from fakes.slack_api import FakeSlack, StoredMessage  # noqa: E402
from support import CallFeed  # noqa: E402

KINDS = ["plain"] * 10 + ["sleep"] * 3 + ["cancel", "remind", "remind", "wait", "wait", "overload", "hang"]
"""What a message asks for, drawn evenly from this list; `injected` (bench_soak.py's) is a sleep with a
reply (`inject`) sent into the turn while the call runs."""
TOKEN = re.compile(r"\bq(\d+) (\w+)")
WAKE = re.compile(r"\[wait elapsed: w(\d+)\]")
ANSWER = re.compile(r"\banswer q(\d+)\b")
WOKE = re.compile(r"\bwoke w(\d+)\b")
REMINDER = re.compile(r"⏰ r(\d+)\b")
MODEL_ERROR = "⚠️ Model error"
DUE_S = 8
"""Reminders and waits come due this long after the turn that sets them."""
CHANNELS = 5
"""The threads share channels, as people do: Slack's pacing of posts (about one a second) is per channel."""
SETTLE_S = 150.0
"""After the traffic: how long everything owed gets to arrive before the checks."""


@dataclass
class Message:
    n: int
    kind: str
    channel: str
    thread: str
    ts: str

    sent_at: float
    """When it was sent (`time.perf_counter()`, the fake Slack's clock)."""


class ThreadPosts:
    """The bot's posts by thread, and when each message's answer first showed, read from the fake Slack's
    answered calls as they come (each call once): looking a thread up costs its own posts, not a scan of
    every message the fake holds, which over a long soak would load the loop the fake acks on."""

    def __init__(self, slack: FakeSlack) -> None:
        self._slack = slack
        self._feed = CallFeed(slack)
        self._threads: defaultdict[tuple[str, str], list[StoredMessage]] = defaultdict(list)
        self.answered_at: dict[int, float] = {}

    def of(self, channel: str, thread: str) -> list[StoredMessage]:
        self._read()
        return [m for m in self._threads[(channel, thread)] if not m.deleted]

    def _read(self) -> None:
        for call in self._feed.new():
            if not call.ok or call.method not in ("chat.postMessage", "chat.update"):
                continue
            if call.method == "chat.postMessage":
                message = self._slack.message(str(call.response["channel"]), str(call.response["ts"]))
                self._threads[(message.channel, message.thread_root)].append(message)
            for n in ANSWER.findall(str(call.params.get("text") or "")):
                self.answered_at.setdefault(int(n), call.time)


@dataclass
class Soak:
    slack: FakeSlack
    model: FakeAnthropic
    daemon: Daemon
    rng: random.Random
    kinds: list[str] = field(default_factory=lambda: KINDS)
    per_thread: int | None = None
    """Messages in a thread before the next goes to a new one (a mention); None: one thread for the run."""
    posts: ThreadPosts = field(init=False)
    messages: list[Message] = field(default_factory=list)
    kills: int = 0
    storms: int = 0
    cancelled: int = 0
    cancels: list[asyncio.Task[None]] = field(default_factory=list)
    hung: set[int] = field(default_factory=set)
    overloaded: set[int] = field(default_factory=set)
    up: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.posts = ThreadPosts(self.slack)


async def until(check: Any, timeout_s: float, every_s: float = 0.5) -> bool:
    """Whether `check()` came true within `timeout_s`, looked at every `every_s` (cheaper than on every change
    of the fake's state, which with thousands of messages would cost the daemon its CPU)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(every_s)
    return True


def user_texts_of(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return [block.get("text", "") for block in content or [] if block.get("type") == "text"]


def unanswered_injections(messages: list[dict[str, Any]]) -> list[int]:
    """The replies sent into a running turn (`qN inject`) that no answer of the conversation names yet."""
    said = " ".join(text for m in messages if m["role"] == "user" for text in user_texts_of(m))
    answered = {
        int(n) for m in messages if m["role"] == "assistant" for t in user_texts_of(m) for n in ANSWER.findall(t)
    }
    return [int(n) for n, kind in TOKEN.findall(said) if kind == "inject" and int(n) not in answered]


def responder(soak: Soak) -> Any:
    """The model: reads which message (or wake-up) the request is about from its words, and answers it, and
    any reply injected into the turn with it."""

    def respond(request: dict[str, Any]) -> Reply | Failure:
        messages = request["messages"]
        last = messages[-1]
        last_texts = " ".join(user_texts_of(last))
        results = isinstance(last.get("content"), list) and any(
            block.get("type") == "tool_result" for block in last["content"]
        )
        woke = " ".join(f"woke w{n}" for n in WAKE.findall(last_texts))
        # Beside a call's result, a reply injected into the turn is not what the turn is about.
        asked = [token for token in TOKEN.findall(last_texts) if not (results and token[1] == "inject")]
        if not asked:
            if not results:  # a wake-up alone
                return Reply.text_only(woke or "ok")
            everything = " ".join(text for m in messages if m["role"] == "user" for text in user_texts_of(m))
            asked = [token for token in TOKEN.findall(everything) if token[1] != "inject"][-1:]
        if not asked:
            return Reply.text_only(woke or "ok")
        n, kind = int(asked[-1][0]), asked[-1][1]
        prefix = f"{woke} " if woke else ""
        if results or kind in ("plain", "inject"):
            injected = "".join(f" answer q{m}" for m in unanswered_injections(messages) if m != n)
            return Reply.text_only(f"{prefix}answer q{n}{injected}")
        if kind == "overload" and n not in soak.overloaded:
            soak.overloaded.add(n)
            return Failure(529)
        if kind == "hang" and n not in soak.hung:
            soak.hung.add(n)
            return Reply.stalled("pings", text=f"{prefix}thinking about q{n}")
        if kind in ("overload", "hang"):
            return Reply.text_only(f"{prefix}answer q{n}")
        use = {
            "sleep": tool_use("sleep_for", {"seconds": 2}),
            "injected": tool_use("sleep_for", {"seconds": 6}),
            "cancel": tool_use("sleep_for", {"seconds": 30}),
            "remind": tool_use("schedule_reminder", {"text": f"r{n}", "in_seconds": DUE_S}),
            "wait": tool_use("wait_for", {"seconds": DUE_S, "reason": f"w{n}"}),
        }[kind]
        return Reply.tools(use, text=woke or None)

    return respond


def answered(soak: Soak, message: Message) -> bool:
    return answers(soak, message) >= 1


def answers(soak: Soak, message: Message) -> int:
    """What the thread holds for this message: its answer (or, for a hung stream, its error line)."""
    posts = [m.text for m in soak.posts.of(message.channel, message.thread)]
    count = sum(int(n) == message.n for post in posts for n in ANSWER.findall(post))
    if message.kind == "hang":
        count += sum(MODEL_ERROR in post for post in posts)  # one hung message per thread at most
    return count


async def thread_worker(soak: Soak, channel: str, numbers: Any, pace: asyncio.Queue[None]) -> None:
    """One thread: a mention, then replies, each sent once the one before was answered; after
    `soak.per_thread` of them, the next is a mention that starts a new thread."""
    thread: str | None = None
    sent = 0
    hung = False
    while not soak.stop.is_set():
        await pace.get()
        if soak.stop.is_set():
            return
        if sent == soak.per_thread:
            thread, sent, hung = None, 0, False
        n = next(numbers)
        kind = soak.rng.choice(soak.kinds)
        if kind == "hang" and hung:
            kind = "plain"  # one hung stream a thread: its error line is then known to be that message's answer
        hung = hung or kind == "hang"
        await soak.up.wait()
        message = await send(soak, channel, thread, n, kind)
        thread, sent = message.thread, sent + 1
        waits = [message]
        if kind == "cancel":
            soak.cancels.append(asyncio.get_running_loop().create_task(cancel_when_shown(soak, message)))
        if kind == "injected" and await until(functools.partial(status_of, soak, message), 60):
            await soak.up.wait()
            waits.append(await send(soak, channel, thread, next(numbers), "inject"))
        for each in waits:
            await until(functools.partial(answered, soak, each), 120)


async def send(soak: Soak, channel: str, thread: str | None, n: int, kind: str) -> Message:
    """Message `n` asking for `kind`: a mention when it opens a thread, else a reply in `thread`."""
    words = f"q{n} {kind}"
    if thread is None:
        event = soak.slack.mention(channel, words)
        thread = str(event["ts"])
    else:
        event = soak.slack.user_message(channel, words, thread_ts=thread)
    message = Message(n, kind, channel, thread, str(event["ts"]), time.perf_counter())
    soak.messages.append(message)
    await soak.slack.send_event(event, connect_timeout=120)
    return message


def status_of(soak: Soak, message: Message) -> str | None:
    """The ts of the status message of the message's call, once it shows."""
    for post in soak.posts.of(message.channel, message.thread):
        if post.blocks and post.blocks[0].get("type") == "section" and float(post.ts) > float(message.ts):
            return str(post.ts)
    return None


async def cancel_when_shown(soak: Soak, message: Message) -> None:
    """❌ on the status message of the message's sleep, once it shows."""
    if await until(lambda: status_of(soak, message) is not None, 60):
        ts = status_of(soak, message)
        assert ts is not None
        await soak.up.wait()
        await soak.slack.send_event(soak.slack.reaction_added("U1", "x", message.channel, ts), connect_timeout=120)
        soak.cancelled += 1


async def killer(soak: Soak) -> None:
    """kill -9 at a random moment every 30–60 s, then a restart on the same data."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(soak.stop.wait(), soak.rng.uniform(30, 60))
        if soak.stop.is_set():
            return
        process, soak.daemon.process = soak.daemon.process, None
        soak.up.clear()
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        soak.kills += 1
        print(f"  kill -9 #{soak.kills} at {len(soak.messages)} messages", flush=True)
        await soak.daemon.start()
        await soak.daemon.connected(total=soak.daemon.runs)
        soak.up.set()


async def storms(soak: Soak) -> None:
    """Every 10–25 s, for 3–8 s, 30% of chat.* calls fail (500, or 429 with Retry-After)."""
    while not soak.stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(soak.stop.wait(), soak.rng.uniform(10, 25))
        if soak.stop.is_set():
            break
        soak.storms += 1
        soak.slack.fail_randomly("chat.", rate=0.3, seed=soak.rng.randrange(1 << 30))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(soak.stop.wait(), soak.rng.uniform(3, 8))
        soak.slack.fail_randomly("chat.", rate=0)


@contextlib.asynccontextmanager
async def world(seed: int, env: dict[str, str] | None = None, **soak: Any) -> AsyncIterator[Soak]:
    """The fakes (Slack pacing posts per channel, redelivering what is not acked in 10 s) and one daemon on a
    scratch data dir with `env` on top of the soak's settings, connected; killed if still running at the end."""
    with tempfile.TemporaryDirectory(prefix="threadbot-chaos-") as data:
        async with FakeSlack(seed=seed, redeliver_after_s=10.0) as slack, FakeAnthropic() as model:
            slack.limit_posts_like_slack()
            daemon = Daemon(slack, model, Path(data))
            daemon.env.update(BOT_MODEL_IDLE_TIMEOUT_S="2", BOT_HEARTBEAT_INTERVAL_S="0", **(env or {}))
            state = Soak(slack, model, daemon, random.Random(seed), **soak)
            model.default = responder(state)
            try:
                await daemon.start()
                await daemon.connected()
                state.up.set()
                yield state
            finally:
                if daemon.process is not None and daemon.process.returncode is None:
                    daemon.process.kill()
                    await daemon.process.wait()


async def load(
    soak: Soak, *, threads: int, rate: float, seconds: float, beside: list[Coroutine[Any, Any, None]]
) -> float:
    """Messages at about `rate` a second over `threads` threads for `seconds`, with `beside` running (each ends
    once `soak.stop` is set); then everything owed gets `SETTLE_S` to arrive. Returns the seconds of traffic."""
    started = time.monotonic()
    numbers = iter(range(1, 1_000_000))
    paces = [asyncio.Queue[None]() for _ in range(threads)]
    workers = [
        asyncio.create_task(thread_worker(soak, f"C{i % CHANNELS + 1:02d}", numbers, paces[i])) for i in range(threads)
    ]
    chaos = [asyncio.create_task(each) for each in beside]
    deadline = started + seconds
    while time.monotonic() < deadline:
        paces[soak.rng.randrange(threads)].put_nowait(None)
        await asyncio.sleep(soak.rng.expovariate(rate))
    soak.stop.set()
    for pace in paces:
        pace.put_nowait(None)
    await asyncio.gather(*chaos)
    soak.slack.fail_randomly("chat.", rate=0)
    await soak.up.wait()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*workers), 60)
    traffic_s = time.monotonic() - started
    await until(lambda: complete(soak), SETTLE_S, every_s=1.0)
    for task in soak.cancels:
        task.cancel()
    return traffic_s


async def soak_run(args: argparse.Namespace) -> int:
    async with world(args.seed) as soak:
        chaos = [killer(soak), storms(soak)]
        traffic_s = await load(soak, threads=args.threads, rate=args.rate, seconds=args.seconds, beside=chaos)
        status = await soak.daemon.stop()
        return report(soak, f"chaos soak, seed {args.seed}", args.threads, traffic_s, status)


def expected(soak: Soak, kind: str) -> set[int]:
    return {m.n for m in soak.messages if m.kind == kind}


def counts(soak: Soak, pattern: re.Pattern[str]) -> Counter[int]:
    found: Counter[int] = Counter()
    for channel in {m.channel for m in soak.messages}:
        for post in soak.slack.messages(channel):
            if post.is_bot:
                found.update(int(n) for n in pattern.findall(post.text))
    return found


def complete(soak: Soak) -> bool:
    reminders, wakes = counts(soak, REMINDER), counts(soak, WOKE)
    return (
        all(answers(soak, m) >= 1 for m in soak.messages)
        and all(reminders[n] >= 1 for n in expected(soak, "remind"))
        and all(wakes[n] >= 1 for n in expected(soak, "wait"))
    )


def report(soak: Soak, title: str, threads: int, traffic_s: float, status: int | None) -> int:
    """The checks: every message answered once, every reminder posted once, every wait woken once, and a clean
    stop; printed with the counts. 1 when one fails."""
    answered = Counter(answers(soak, m) for m in soak.messages)
    reminders, wakes = counts(soak, REMINDER), counts(soak, WOKE)
    want_reminders, want_wakes = expected(soak, "remind"), expected(soak, "wait")
    kinds = Counter(m.kind for m in soak.messages)
    abandoned = len(soak.slack.abandoned)
    posts = soak.slack.calls_to("chat.postMessage")
    failures = {
        "never answered": answered.get(0, 0),
        "answered twice or more": sum(v for k, v in answered.items() if k > 1),
        "reminders never posted": len([n for n in want_reminders if reminders[n] == 0]),
        "reminders posted twice": len([n for n in want_reminders if reminders[n] > 1]),
        "waits never woken": len([n for n in want_wakes if wakes[n] == 0]),
        "waits woken twice": len([n for n in want_wakes if wakes[n] > 1]),
    }
    print(f"{title}: {traffic_s:.0f} s of traffic over {threads} threads")
    print(f"  messages          {len(soak.messages)} ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
    print(f"  kill -9           {soak.kills} (restarts on the same data: {soak.daemon.runs - 1})")
    print(
        f"  Slack storms      {soak.storms}; chat.postMessage calls {len(posts)}, of them 429: "
        f"{sum(c.status == 429 for c in posts)}, 5xx: {sum(c.status >= 500 for c in posts)}"
    )
    print(f"  cancels           {soak.cancelled} ❌ on a running call's status message")
    print(
        f"  model             {len(soak.model.requests)} requests, {len(soak.overloaded)} answered 529 first, "
        f"{len(soak.hung)} streams hung"
    )
    print(f"  events Slack gave up redelivering (never acked): {abandoned}")
    print(f"  answered exactly once   {answered.get(1, 0)} of {len(soak.messages)}")
    print(f"  reminders posted once   {sum(reminders[n] == 1 for n in want_reminders)} of {len(want_reminders)}")
    print(f"  waits woken once        {sum(wakes[n] == 1 for n in want_wakes)} of {len(want_wakes)}")
    print(f"  clean stop              exit status {status}")
    bad = {what: n for what, n in failures.items() if n}
    if bad or status != 0:
        print(f"FAILED: {bad or ''}{' unclean stop' if status != 0 else ''}")
        for m in soak.messages:
            if answers(soak, m) != 1:
                print(f"    q{m.n} ({m.kind}) in {m.channel}/{m.thread}: {answers(soak, m)} answers")
        return 1
    print("OK: every message answered once, every reminder and wait once")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="how long messages keep coming")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--rate", type=float, default=1.0, help="messages a second, on average")
    sys.exit(asyncio.run(soak_run(parser.parse_args())))


if __name__ == "__main__":
    main()
