"""The plain tools, run directly with a ToolContext: output shapes, progress, cancel and timeouts."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from proc_groups import ECHO_PGID, assert_group_gone, cancel_and_assert_gone, group_exists
from proc_groups import UNFENCED_SHELL as run_command

from tools import builtin_tools
from tools.base import Tool, ToolContext, ToolError, tool
from tools.now import now
from tools.sandbox import ShellPolicy, session_dir
from tools.sleep_for import sleep_for
from tools.wordcount import wordcount

STOPS_S = 2.0
"""How soon cancelled work must be over in these tests: far inside the 30 s it would take, loose enough for a
loaded machine. The 100 ms target is a figure that bench/bench_calls.py prints, not a test's to time."""
LATE_S = 0.75
"""How late a timer may fire on a loaded machine (the event loop's lag, never the tool's drift)."""

GROUP_AND_TWO_SLEEPS = f"{ECHO_PGID}; sleep 30 & sleep 30; wait"


@dataclass
class Recorder:
    """Collects what a tool reports, with when, and wakes a waiter on each report."""

    entries: list[tuple[float, str, Any]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, kind: str, payload: Any) -> None:
        self.entries.append((time.perf_counter(), kind, payload))
        self.changed.set()

    async def wait_count(self, n: int, timeout: float = 10) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout):
            while len(self.entries) < n:
                self.changed.clear()
                await self.changed.wait()


def make_ctx(tmp_path: Path, recorder: Recorder) -> ToolContext:
    return ToolContext("toolu_test", "test:session", tmp_path / "work", recorder, asyncio.get_running_loop())


# --- now and wordcount -------------------------------------------------------------------------


async def test_now_is_iso8601_with_zone(tmp_path: Path) -> None:
    value = now.run({}, make_ctx(tmp_path, Recorder()))
    assert isinstance(value, str)
    moment = datetime.fromisoformat(value)
    assert moment.tzinfo is not None and moment.utcoffset() is not None
    assert moment.microsecond == 0  # seconds precision
    assert abs(moment - datetime.now().astimezone()) < timedelta(seconds=5)


@pytest.mark.parametrize(
    ("text", "words"),
    [("", 0), ("hello", 1), ("hello  world", 2), (" one\ttwo\nthree  ", 3), ("naïve café — ok", 4)],
)
async def test_wordcount(tmp_path: Path, text: str, words: int) -> None:
    assert wordcount.run({"text": text}, make_ctx(tmp_path, Recorder())) == {"words": words}


def test_builtin_tools_offer_the_shell_only_when_enabled() -> None:
    assert [t.name for t in builtin_tools(shell=None)] == ["now", "wordcount", "sleep_for", "share_file", "ask_user"]
    with_shell = ["now", "wordcount", "sleep_for", "share_file", "ask_user", "run_command"]
    assert [t.name for t in builtin_tools(shell=ShellPolicy())] == with_shell


def test_tool_specs_have_the_contract_shape() -> None:
    for item in builtin_tools(shell=ShellPolicy()):
        spec = item.spec()
        assert set(spec) == {"name", "description", "input_schema"}
        assert spec["input_schema"]["type"] == "object"
    assert sleep_for.input_schema["required"] == ["seconds"]
    assert wordcount.input_schema["required"] == ["text"]
    assert run_command.input_schema["required"] == ["command"]
    assert now.input_schema["properties"] == {}


def test_tool_factory_declares_sync_and_async() -> None:
    @tool("sync_one", "A sync tool.", {"x": {"type": "integer"}}, required=("x",), timeout_s=3)
    def sync_one(args: dict[str, Any], ctx: ToolContext) -> int:
        return int(args["x"])

    @tool("async_one", "An async tool.", uses_slot=False, quick=True)
    async def async_one(args: dict[str, Any], ctx: ToolContext) -> int:
        return 1

    assert isinstance(sync_one, Tool) and not sync_one.is_async and sync_one.timeout_s == 3
    assert sync_one.input_schema == {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
        "additionalProperties": False,
        "required": ["x"],
    }
    assert async_one.is_async and not async_one.uses_slot and async_one.quick


async def test_progress_from_a_thread_reaches_the_loop(tmp_path: Path) -> None:
    recorder = Recorder()
    ctx = make_ctx(tmp_path, recorder)
    await asyncio.to_thread(ctx.progress, {"step": 1})
    await asyncio.to_thread(ctx.log, "a line")
    await recorder.wait_count(2)
    assert [(kind, payload) for _, kind, payload in recorder.entries] == [("partial", {"step": 1}), ("log", "a line")]


# --- sleep_for -----------------------------------------------------------------------------------


async def test_sleep_for_reports_progress_each_second(tmp_path: Path) -> None:
    recorder = Recorder()
    start = time.perf_counter()
    result = await sleep_for.run({"seconds": 2.3}, make_ctx(tmp_path, recorder))
    elapsed = time.perf_counter() - start
    assert result == "slept for 2.3s"
    assert 2.25 <= elapsed < 2.3 + LATE_S
    payloads = [payload for _, _, payload in recorder.entries]
    assert [p["slept_s"] for p in payloads] == [1.0, 2.0, 2.3]
    assert all(p["total_s"] == 2.3 and p["message"].startswith("slept ") for p in payloads)
    offsets = [at - start for at, _, _ in recorder.entries]
    for offset, expected in zip(offsets, (1.0, 2.0, 2.3), strict=True):
        assert expected - 0.05 <= offset < expected + LATE_S, offsets
    assert {kind for _, kind, _ in recorder.entries} == {"partial"}


async def test_sleep_for_zero_returns_at_once(tmp_path: Path) -> None:
    recorder = Recorder()
    assert await sleep_for.run({"seconds": 0}, make_ctx(tmp_path, recorder)) == "slept for 0s"
    assert recorder.entries == []


async def test_sleep_for_cancels_mid_sleep(tmp_path: Path) -> None:
    recorder = Recorder()
    task = asyncio.create_task(sleep_for.run({"seconds": 30}, make_ctx(tmp_path, recorder)))  # type: ignore[arg-type]
    await recorder.wait_count(1)  # mid-sleep, between two progress reports
    start = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.perf_counter() - start < STOPS_S
    assert len(recorder.entries) == 1


# --- run_command -----------------------------------------------------------------------------------


async def test_run_command_streams_lines_and_returns_exit_code(tmp_path: Path) -> None:
    recorder = Recorder()
    result = await run_command.run(
        {"command": "echo one; echo two >&2; echo three; exit 3"}, make_ctx(tmp_path, recorder)
    )
    assert result == {"exit_code": 3, "output": "one\ntwo\nthree\n", "truncated": False}
    assert [(kind, payload) for _, kind, payload in recorder.entries] == [
        ("log", "one"),
        ("log", "two"),
        ("log", "three"),
    ]


async def test_run_command_reports_each_line_as_it_is_printed(tmp_path: Path) -> None:
    """The first line arrives while the command is still running, not at the end."""
    recorder = Recorder()
    gate = tmp_path / "gate"
    command = f"echo first; while [ ! -e {gate} ]; do sleep 0.01; done; echo second"
    task = asyncio.create_task(run_command.run({"command": command}, make_ctx(tmp_path, recorder)))  # type: ignore[arg-type]
    await recorder.wait_count(1)
    assert not task.done() and recorder.entries[0][1:] == ("log", "first")
    gate.touch()
    result = await task
    assert result["exit_code"] == 0 and [p for _, _, p in recorder.entries] == ["first", "second"]


async def test_run_command_runs_in_the_work_directory(tmp_path: Path) -> None:
    result = await run_command.run({"command": "pwd"}, make_ctx(tmp_path, Recorder()))
    assert result["output"].strip() == str(session_dir(tmp_path / "work", "test:session"))


async def test_run_command_keeps_the_tail_of_long_output(tmp_path: Path) -> None:
    result = await run_command.run({"command": "seq 1 10000"}, make_ctx(tmp_path, Recorder()))
    assert result["truncated"] is True
    assert result["output"].endswith("9999\n10000\n") and len(result["output"]) == 16_000


async def test_run_command_cancel_kills_the_whole_process_group(tmp_path: Path) -> None:
    recorder = Recorder()
    task = asyncio.create_task(run_command.run({"command": GROUP_AND_TWO_SLEEPS}, make_ctx(tmp_path, recorder)))  # type: ignore[arg-type]
    await recorder.wait_count(1)
    pgid = int(recorder.entries[0][2].split()[1])
    assert group_exists(pgid)
    await cancel_and_assert_gone(task, pgid, stops_s=STOPS_S)


async def test_run_command_timeout_fails_and_kills_the_group(tmp_path: Path) -> None:
    recorder = Recorder()
    start = time.perf_counter()
    with pytest.raises(ToolError, match=r"timed out after 0\.3s"):
        await run_command.run({"command": GROUP_AND_TWO_SLEEPS, "timeout_seconds": 0.3}, make_ctx(tmp_path, recorder))
    assert time.perf_counter() - start < 2.0
    pgid = int(recorder.entries[0][2].split()[1])
    await assert_group_gone(pgid)


async def test_run_command_term_ignoring_child_is_killed_after_the_grace(tmp_path: Path) -> None:
    recorder = Recorder()
    command = f"trap '' TERM; {ECHO_PGID}; sleep 30 & wait"
    task = asyncio.create_task(run_command.run({"command": command}, make_ctx(tmp_path, recorder)))  # type: ignore[arg-type]
    await recorder.wait_count(1)
    pgid = int(recorder.entries[0][2].split()[1])
    start = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.perf_counter() - start >= 1.9  # SIGKILL came after the grace
    await assert_group_gone(pgid)


async def test_run_command_sees_none_of_the_daemons_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SLACK_BOT_TOKEN", "ANTHROPIC_API_KEY", "BOT_DATABASE_URL", "OTHER_SECRET"):
        monkeypatch.setenv(name, "sekrit-value")
    monkeypatch.setenv("TZ", "Europe/Paris")
    result = await run_command.run({"command": "env"}, make_ctx(tmp_path, Recorder()))
    names = {line.partition("=")[0] for line in result["output"].splitlines()}
    assert "sekrit-value" not in result["output"]
    assert names <= {"PATH", "HOME", "LANG", "TZ", "TERM", "PWD", "SHLVL", "_", "OLDPWD"}
    home = session_dir(tmp_path / "work", "test:session")
    assert f"HOME={home}\n" in result["output"] and "TZ=Europe/Paris" in result["output"]


async def test_run_command_in_bwrap_sees_only_its_session_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "sekrit-value")
    (tmp_path / "bot.db").write_text("conversations")
    tool_ = builtin_tools(shell=ShellPolicy())[-1]
    ctx = make_ctx(tmp_path, Recorder())
    command = f"env; cat {tmp_path}/bot.db ../bot.db; ls -A ~ /root /home; echo hi > mine; pwd"
    result = await tool_.run({"command": command}, ctx)
    assert "sekrit-value" not in result["output"] and "conversations" not in result["output"]
    assert result["output"].rstrip().endswith("/work")
    [session] = (tmp_path / "work").iterdir()
    assert (session / "mine").read_text() == "hi\n"
    other = ToolContext("toolu_2", "other:session", tmp_path / "work", Recorder(), asyncio.get_running_loop())
    peek = await tool_.run({"command": "cat ../*/mine; ls .."}, other)
    assert "hi" not in peek["output"]
