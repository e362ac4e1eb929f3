"""Start-up benchmark: spawn → Socket Mode hello, the timeline in between, and the import profile.

Run: `.venv/bin/python bench/bench_start.py [runs]` (about half a minute; 5 runs by default). Prints figures;
asserts nothing. Target: spawn → hello ≤ 0.6 s with the default configuration (SQLite, no MCP servers, no
heartbeat file). Baseline, measured in the same run: a bare bolt app on Socket Mode whose listeners do nothing
(bench_slack.py's `--baseline-app`), which is as fast as a Python Slack daemon can say hello here, and the
baseline tree `BENCH_BASELINE_TREE` (bench_slack.py's, 45f8fd7 by default) started the same way.

The timeline is read off the fake Slack: when the process was spawned, when its first Web API call arrived
(`auth.test`: Python, the imports and the settings are done), when it asked for a socket
(`apps.connections.open`), when the fake said hello. A restart on a data dir with work to resume is measured
too: resume must not delay the socket. The import profile is `python -X importtime` of what `run` imports
before it says hello, by top-level package.

The tree's bytecode is compiled first, as installing a package does: without it (an editable install run
with PYTHONDONTWRITEBYTECODE set, as on this project's machines) every start compiles threadbot's ~150
modules from source, about 130 ms more.
"""

from __future__ import annotations

import asyncio
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from bench_slack import BASELINE_TREE, _env, _spawn, _stop  # noqa: E402
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use  # noqa: E402
from fakes.slack_api import FakeSlack  # noqa: E402

RUNS = 5
RESUME_THREADS = 20


async def _one_start(slack: FakeSlack, env: dict[str, str], data: Path, args: list[str]) -> dict[str, float]:
    """Spawn, wait for hello, stop; the timeline's marks in seconds after the spawn."""
    first_call = len(slack.calls)
    sessions = len(slack.connections)
    spawned = time.perf_counter()
    process = await _spawn(args, env, data, "start")
    try:
        connection = await slack.wait_connected(60, total=sessions + 1)
    finally:
        await _stop(process)
    await slack.wait_for(lambda: not slack.open_connections, 10, "the process gone")
    calls = slack.calls[first_call:]

    def first(method: str) -> float:
        return next((c.time - spawned for c in calls if c.method == method), float("nan"))

    return {
        "auth.test": first("auth.test"),
        "connections.open": first("apps.connections.open"),
        "hello": connection.opened_at - spawned,
    }


async def _work_to_resume(slack: FakeSlack, model: FakeAnthropic, env: dict[str, str], data: Path) -> None:
    """Leave `RESUME_THREADS` threads with a running call in the data dir, then kill the daemon."""
    process = await _spawn(["-m", "bot", "run"], env, data, "seed")
    try:
        await slack.wait_connected(60, total=len(slack.connections) + 1)
        for i in range(RESUME_THREADS):
            model.script(Reply.tools(tool_use("sleep_for", {"seconds": 600})))
            await slack.wait_ack(await slack.send_event(slack.mention("CRESUME", f"nap {i}")))
        await model.wait_for_requests(RESUME_THREADS, 60)
    finally:
        process.kill()
        await process.wait()
    await slack.wait_for(lambda: not slack.open_connections, 10, "the killed daemon gone")


def import_profile(top: int = 12) -> tuple[float, list[tuple[str, float]]]:
    """What importing the daemon costs, by top-level package (`-X importtime`, self times summed)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import bot.__main__, bot.slack.daemon"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stderr
    by_package: dict[str, float] = defaultdict(float)
    for line in out.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cumulative, name = line.removeprefix("import time:").split("|")
        by_package[name.strip().split(".")[0]] += int(self_us) / 1e6
    ordered = sorted(by_package.items(), key=lambda item: -item[1])
    return sum(by_package.values()), ordered[:top]


def _report(name: str, runs: list[dict[str, float]]) -> None:
    marks = ("auth.test", "connections.open", "hello")
    cells = "  ".join(f"{m} {statistics.median(r[m] for r in runs) * 1000:6.0f} ms" for m in marks)
    print(f"  {name:<28} {cells}   (median of {len(runs)})")


async def main(runs: int) -> None:
    print(f"threadbot start-up benchmark ({os.cpu_count()} CPUs, Python {sys.version.split()[0]})\n")
    trees = [ROOT, BASELINE_TREE] if BASELINE_TREE.exists() else [ROOT]
    for tree in trees:
        for package in ("bot", "tools"):
            compileall.compile_dir(tree / package, quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        async with FakeSlack() as slack, FakeAnthropic() as model:
            env = _env(slack, model, data)
            bare = [str(HERE.parent / "bench_slack.py"), "--baseline-app"]
            baseline = [await _one_start(slack, env, data, bare) for _ in range(runs)]
            fresh = [await _one_start(slack, env, data, ["-m", "bot", "run"]) for _ in range(runs)]
            before: list[dict[str, float]] = []
            for tree in trees[1:]:  # a data dir of its own: an older tree may not open this tree's schema
                (home := data / tree.name).mkdir()
                tree_env = _env(slack, model, home) | {"PYTHONPATH": str(tree)}
                before += [await _one_start(slack, tree_env, home, ["-m", "bot", "run"]) for _ in range(runs)]
            await _work_to_resume(slack, model, env, data)
            resumed = [await _one_start(slack, env, data, ["-m", "bot", "run"])]
    print("spawn → Socket Mode hello (target ≤ 600 ms; marks are the first auth.test, apps.connections.open, hello)")
    _report("baseline: bare bolt app", baseline)
    _report("threadbot run", fresh)
    if before:
        _report(f"baseline tree {BASELINE_TREE.name}, run", before)
    else:
        print(f"  (no baseline tree at {BASELINE_TREE}: git worktree add {BASELINE_TREE} 45f8fd7)")
    _report(f"threadbot run, {RESUME_THREADS} calls to resume", resumed)
    total, packages = import_profile()
    print(f"\nimports before hello: {total * 1000:.0f} ms in all, by package (self time):")
    for name, seconds in packages:
        print(f"  {name:<24} {seconds * 1000:6.0f} ms")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else RUNS))
