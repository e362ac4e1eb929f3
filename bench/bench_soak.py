"""Soak: one daemon under bench_chaos.py's mixed load for twenty minutes, one graceful restart halfway, its
resources watched from outside; nothing may grow without bound.

Run: `.venv/bin/python bench/bench_soak.py [--minutes 20] [--seed 1] [--threads 20] [--rate 1.0]`
(`--minutes 3` while developing). Time-scaled where the daemon allows it: tool calls of 2–6 s, reminders and
waits due 8 s after the turn that sets them, a hung stream given up after 2 s.

The load is bench_chaos.py's (`load`, `thread_worker`), without its kill -9s and Slack storms: messages at
about `--rate` a second over `--threads` threads, each thread `--per-thread` messages long before its worker
starts a new one with a mention (so sessions keep being created, as in a workspace, and no conversation grows
for the whole run); plain answers, tool calls, calls cancelled with ❌, replies injected into a running call's
turn, reminders, waits, a 529 first, hung streams. At half time: SIGTERM, then a start on the same data.

Every `--every` seconds, from outside the daemon's process: its RSS (/proc/PID/status VmRSS), open file
descriptors (/proc/PID/fd), asyncio tasks (`threadbot_asyncio_tasks` on its /metrics), the database's size
(bot.db and bot.db-wal), and over the interval the p99 of event → ack (the fake Slack's envelope to its ack)
and of message → answer visible for plain answers (the event sent to the first chat.* call carrying it).

Then, for each of the two runs of the daemon, after `--warmup` seconds: the figures of its first and last
`--window` seconds, and a line fitted over its samples: growth per 10 minutes against a tolerance. The database
grows by design with what it keeps (sessions stay for BOT_RETENTION_DAYS); what may not grow is what it costs
per message, so its verdict compares the bytes per answered message of the two halves. At the end the
exactly-once checks of bench_chaos.py. Exit status 1 when a figure grows without bound or a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import aiohttp
from bench_chaos import KINDS, Message, Soak, load, report, world
from support import pct

TASKS_GAUGE = "threadbot_asyncio_tasks "
SOAK_KINDS = [*KINDS, "injected", "injected"]


@dataclass(frozen=True)
class Sample:
    at: float
    """Seconds since the traffic started."""
    run: int
    """Which start of the daemon (1, then 2 after the restart)."""
    rss_mb: float
    fds: int
    tasks: int
    db_mb: float
    """The database's files: bot.db and bot.db-wal."""
    held_mb: float
    """What the database holds (its pages in use, as a reader sees them: the WAL's included), which unlike the
    files' size does not depend on when SQLite last copied the WAL back."""
    owed: int
    """Rows of work the store still owes: posts in the outbox, inbox rows not answered, reminders and waits
    pending. Under steady load they come and go."""
    answered: int
    """Messages answered so far: what the database's growth is divided by."""
    acks_ms: list[float]
    """Event → ack of the envelopes acked since the sample before."""
    answers_ms: list[float]
    """Message → answer visible of the plain answers shown since the sample before."""


@dataclass(frozen=True)
class Figure:
    name: str
    unit: str
    values: Callable[[Sample], list[float]]
    tolerance: float
    """Growth per 10 minutes (in `unit`) still taken as flat: noise, and a heap settling."""
    latency: bool = False
    """A window's figure is the p99 of all its values (not the median of its samples), a point of the fitted
    line a minute's p99, and the tolerance a fraction of the start window's, at least `floor`."""
    floor: float = 0.0
    """The least tolerance of a latency: a few milliseconds of p99 come and go with the machine's other load."""

    def level(self, samples: list[Sample]) -> float | None:
        values = [v for s in samples for v in self.values(s)]
        if not values:
            return None
        return pct(values, 99) if self.latency else median(values)

    def points(self, samples: list[Sample]) -> list[tuple[float, float]]:
        if not self.latency:
            return [(s.at, v) for s in samples for v in self.values(s)]
        minutes: dict[int, list[Sample]] = {}
        for s in samples:
            minutes.setdefault(int(s.at // 60), []).append(s)
        return [(60 * m + 30, p99) for m, group in minutes.items() if (p99 := self.level(group)) is not None]


FIGURES = [
    Figure("RSS", "MB", lambda s: [s.rss_mb], 6.0),
    Figure("open fds", "", lambda s: [s.fds], 3.0),
    Figure("asyncio tasks", "", lambda s: [s.tasks], 10.0),
    Figure("event → ack p99", "ms", lambda s: s.acks_ms, 0.5, latency=True, floor=10.0),
    Figure("answer p99 (plain)", "ms", lambda s: s.answers_ms, 0.5, latency=True, floor=100.0),
    Figure("rows owed", "", lambda s: [s.owed], 10.0),
    Figure("database files", "MB", lambda s: [s.db_mb], 0.0),
]
"""The database's files are fitted and shown like the others; their verdict is `database_verdict`'s."""
OWED = """
SELECT (SELECT count(*) FROM outbox) + (SELECT count(*) FROM inbox WHERE answered_at IS NULL)
     + (SELECT count(*) FROM reminders WHERE status = 'pending')
"""
DB_PER_MESSAGE_TOLERANCE = 0.5
"""The database's bytes per answered message may differ by this fraction between a run's two halves."""


@dataclass
class Watch:
    """The samples, and the fake Slack's envelopes, acks and answers read since the last one."""

    soak: Soak
    port: int
    samples: list[Sample] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    sent: dict[str, float] = field(default_factory=dict)
    _envelopes: int = 0
    _acks: int = 0
    _messages: int = 0
    _unshown: list[Message] = field(default_factory=list)
    """Messages sent and not answered yet (by the sample before)."""

    def latencies(self) -> tuple[list[float], list[float]]:
        """Acks (ms from envelope to ack) and plain answers (ms from message to answer) since the last call."""
        slack = self.soak.slack
        for envelope in slack.envelopes[self._envelopes :]:
            self.sent[envelope.envelope_id] = envelope.time
        self._envelopes = len(slack.envelopes)
        acks = list(slack.acks.values())[self._acks :]
        self._acks += len(acks)
        acked = [(a.time - self.sent.pop(a.envelope_id)) * 1000 for a in acks if a.envelope_id in self.sent]
        self.soak.posts.of("", "")  # reads the calls that came since
        shown = self.soak.posts.answered_at
        self._unshown += self.soak.messages[self._messages :]
        self._messages = len(self.soak.messages)
        answers = [(shown[m.n] - m.sent_at) * 1000 for m in self._unshown if m.n in shown and m.kind == "plain"]
        self._unshown = [m for m in self._unshown if m.n not in shown]
        return acked, answers

    async def sample(self, session: aiohttp.ClientSession) -> None:
        process = self.soak.daemon.process
        if process is None or process.returncode is not None:
            return
        try:
            rss_kb, fds, db = resources(process.pid, self.soak.daemon.data_dir)
            held, owed = contents(self.soak.daemon.data_dir / "bot.db")
            async with session.get(f"http://127.0.0.1:{self.port}/metrics") as response:
                text = await response.text()
        except (OSError, sqlite3.Error, aiohttp.ClientError, StopIteration):
            return  # stopping, or not listening yet
        tasks = next((int(float(line.split()[1])) for line in text.splitlines() if line.startswith(TASKS_GAUGE)), -1)
        acks, answers = self.latencies()
        self.samples.append(
            Sample(
                at=time.perf_counter() - self.started,
                run=self.soak.daemon.runs,
                rss_mb=rss_kb / 1024,
                fds=fds,
                tasks=tasks,
                db_mb=db / 1e6,
                held_mb=held / 1e6,
                owed=owed,
                answered=self._messages - len(self._unshown),
                acks_ms=acks,
                answers_ms=answers,
            )
        )

    def progress(self, s: Sample) -> None:
        print(
            f"  {s.at / 60:4.1f} min, run {s.run}: RSS {s.rss_mb:.1f} MB, {s.fds} fds, {s.tasks} tasks, "
            f"database {s.db_mb:.1f} MB (holds {s.held_mb:.1f}), {s.owed} owed, {s.answered} answered",
            flush=True,
        )

    async def run(self, every_s: float) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while not self.soak.stop.is_set():
                taken = len(self.samples)
                await self.sample(session)
                if len(self.samples) > taken and len(self.samples) % max(1, round(60 / every_s)) == 0:
                    self.progress(self.samples[-1])
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.soak.stop.wait(), every_s)


def resources(pid: int, data: Path) -> tuple[int, int, int]:
    """The process's RSS (kB) and open file descriptors, and the database's bytes (the file and its WAL)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    db = sum(path.stat().st_size for path in (data / "bot.db", data / "bot.db-wal") if path.exists())
    return rss_kb, fds, db


def contents(path: Path) -> tuple[int, int]:
    """The bytes the database holds and its owed rows, read as another reader (WAL readers never block it)."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)) as db:
        pages, free, size = (
            db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size")
        )
        owed = db.execute(OWED).fetchone()[0]
    return (pages - free) * size, int(owed)


async def restart(soak: Soak, after_s: float) -> None:
    """SIGTERM once, after `after_s`, and a start on the same data; the thread workers wait meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(soak.stop.wait(), after_s)
    if soak.stop.is_set():
        return
    soak.up.clear()
    begun = time.monotonic()
    status = await soak.daemon.stop()
    await soak.daemon.start()
    await soak.daemon.connected(total=soak.daemon.runs)
    soak.up.set()
    back_s = time.monotonic() - begun
    print(f"  restart at {len(soak.messages)} messages: exit status {status}, up again in {back_s:.1f} s", flush=True)


def slope_per_10_min(points: list[tuple[float, float]]) -> float:
    """The least-squares line's slope through (seconds, value), per 600 s."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    return 600 * sum((t - mean_t) * (v - mean_v) for t, v in points) / spread if spread else 0.0


def verdicts(watch: Watch, warmup_s: float, window_s: float) -> bool:
    """The table of each run's first and last window and the fitted growth; True when everything is flat."""
    flat = True
    for run in sorted({s.run for s in watch.samples}):
        mine = [s for s in watch.samples if s.run == run]
        steady = [s for s in mine if s.at >= mine[0].at + warmup_s]
        if len(steady) < 4:
            print(f"  run {run}: too short for a verdict ({len(steady)} samples after warm-up)")
            continue
        first = [s for s in steady if s.at < steady[0].at + window_s]
        last = [s for s in steady if s.at > steady[-1].at - window_s]
        span = (steady[0].at / 60, steady[-1].at / 60)
        print(
            f"\n  run {run} of the daemon: minutes {span[0]:.1f}–{span[1]:.1f} after a {warmup_s:.0f} s warm-up "
            f"({len(steady)} samples; windows of {window_s:.0f} s, medians)"
        )
        print(f"  {'figure':<22} {'start':>10} {'end':>10} {'growth /10 min':>16} {'tolerance':>10}  verdict")
        for figure in FIGURES:
            start, end, points = figure.level(first), figure.level(last), figure.points(steady)
            unit = f" {figure.unit}" if figure.unit else ""
            if start is None or end is None or len(points) < 2:
                print(f"  {figure.name:<22} {'—':>10}")
                continue
            growth = slope_per_10_min(points)
            if figure.name == "database files":
                ok, verdict = database_verdict(steady)
                print(f"  {figure.name:<22} {start:>10.1f} {end:>10.1f} {growth:>+13.1f}{unit:<3} {verdict}")
                flat &= ok
                continue
            tolerance = max(figure.tolerance * start, figure.floor) if figure.latency else figure.tolerance
            # Unbounded only when the line climbs and the end sits above the start by as much: one slow
            # window at either end of a noisy figure moves the line, or the ends, not both.
            gone = (end - start) * 600 / max(steady[-1].at - steady[0].at, 1.0)
            ok = growth <= tolerance or gone <= tolerance
            flat &= ok
            print(
                f"  {figure.name:<22} {start:>10.1f} {end:>10.1f} {growth:>+13.1f}{unit:<3} {tolerance:>10.1f}  "
                f"{'bounded' if ok else 'GROWS'}"
            )
    return flat


def database_verdict(steady: list[Sample]) -> tuple[bool, str]:
    """What the database holds, per answered message, in each half of the run: it grows with what it keeps
    (sessions stay for BOT_RETENTION_DAYS), not faster."""
    middle = steady[len(steady) // 2]
    halves = [(steady[0], middle), (middle, steady[-1])]
    per_message = [
        (b.held_mb - a.held_mb) * 1e6 / (b.answered - a.answered) if b.answered > a.answered else 0.0 for a, b in halves
    ]
    ok = per_message[1] <= per_message[0] * (1 + DB_PER_MESSAGE_TOLERANCE) + 1_000
    words = f"holds {per_message[0] / 1000:.1f} kB a message, then {per_message[1] / 1000:.1f} kB"
    return ok, f"{words}: {'bounded per message' if ok else 'GROWS per message'}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def soak_run(args: argparse.Namespace) -> int:
    seconds = args.minutes * 60
    port = free_port()
    env = {"BOT_METRICS_PORT": str(port), "BOT_METRICS_HOST": "127.0.0.1"}
    async with world(args.seed, env, kinds=SOAK_KINDS, per_thread=args.per_thread) as soak:
        watch = Watch(soak, port)
        beside = [restart(soak, seconds / 2), watch.run(args.every)]
        print(f"soak: {args.minutes:g} min of traffic, sampling every {args.every:g} s", flush=True)
        traffic_s = await load(soak, threads=args.threads, rate=args.rate, seconds=seconds, beside=beside)
        status = await soak.daemon.stop()
        checks = report(soak, f"soak, seed {args.seed}", args.threads, traffic_s, status)
    flat = verdicts(watch, args.warmup, args.window)
    print("OK: nothing grows without bound" if flat else "FAILED: something grows without bound")
    return 1 if checks or not flat else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="how long messages keep coming")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=20, help="threads open at once")
    parser.add_argument("--per-thread", type=int, default=4, help="messages in a thread before a new one")
    parser.add_argument("--rate", type=float, default=1.0, help="messages a second, on average")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=120.0, help="seconds of each run left out of the verdict")
    parser.add_argument("--window", type=float, default=120.0, help="seconds of the start and end windows")
    sys.exit(asyncio.run(soak_run(parser.parse_args())))


if __name__ == "__main__":
    main()
