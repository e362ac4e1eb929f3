"""The console and oneshot commands, run as real processes against the fake Messages API."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from pathlib import Path

from conftest import OPEN_POLICY
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use, user_texts

ROOT = Path(__file__).resolve().parents[1]
START_S = 45.0
"""How long a test waits for a process started just now: Python with the engine takes seconds to start on a
loaded machine (12 s measured with two cores shared by eight), and only a broken start takes this long."""


def bot_env(fake: FakeAnthropic, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BOT_", "SLACK_", "ANTHROPIC_"))}
    env.update(
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY="test",
        BOT_DATA_DIR=str(data_dir),
        BOT_POLICY_FILE=str(OPEN_POLICY),
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


async def run_bot(
    *args: str, env: dict[str, str], cwd: Path, stdin: bytes = b"", timeout_s: float = 30
) -> tuple[int, str, str]:
    process = await spawn_bot(*args, env=env, cwd=cwd)
    out, err = await asyncio.wait_for(process.communicate(stdin), timeout_s)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def start_console(fake: FakeAnthropic, tmp_path: Path) -> asyncio.subprocess.Process:
    """`python -m bot console` with pipes, for tests that type into it while it works."""
    return await spawn_bot("console", env=bot_env(fake, tmp_path), cwd=tmp_path)


async def spawn_bot(*args: str, env: dict[str, str], cwd: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )


async def test_console_through_a_pipe_chats_and_shows_tool_progress(fake: FakeAnthropic, tmp_path: Path) -> None:
    fake.script(
        Reply.tools(tool_use("wordcount", {"text": "one two three"}), text="Counting."), Reply.text_only("3 words.")
    )
    code, out, err = await run_bot("console", env=bot_env(fake, tmp_path), cwd=tmp_path, stdin=b"count my words\n")
    assert code == 0, err
    assert "assistant: Counting." in out
    assert "✅ wordcount(text=one two three)" in out
    assert "assistant: 3 words." in out
    assert " INFO " not in err, "a piped console shows warnings and errors only"
    assert fake.rejections == []


async def test_console_line_typed_during_a_tool_is_an_injection(fake: FakeAnthropic, tmp_path: Path) -> None:
    gate = asyncio.Event()
    fake.script(
        Reply.tools(tool_use("sleep_for", {"seconds": 30}), text="Sleeping.", hold=gate),
        Reply.text_only("Skipping the sleep."),
        Reply.text_only("Noted the cancelled sleep."),
    )
    process = await start_console(fake, tmp_path)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b"sleep for thirty seconds\n")
    await process.stdin.drain()
    await fake.wait_for_requests(1, timeout=START_S)
    gate.set()
    line = await asyncio.wait_for(process.stdout.readline(), START_S)
    while b"sleep_for" not in line:
        line = await asyncio.wait_for(process.stdout.readline(), START_S)
    process.stdin.write(b"actually skip the sleep\n")
    await process.stdin.drain()
    requests = await fake.wait_for_requests(2)
    assert "[mid-turn user note] actually skip the sleep" in [typed(text) for text in user_texts(requests[1])]
    # The yielded sleep is still running: Ctrl-C-free way out is closing stdin, then SIGINT cancels it.
    process.send_signal(signal.SIGINT)
    process.stdin.close()
    await asyncio.wait_for(process.wait(), START_S)
    assert fake.rejections == []


async def test_oneshot_prints_json(fake: FakeAnthropic, tmp_path: Path) -> None:
    fake.script(Reply.tools(tool_use("now", {})), Reply.text_only("It is now."))
    code, out, err = await run_bot("oneshot", "what time is it?", env=bot_env(fake, tmp_path), cwd=tmp_path)
    assert code == 0, err
    report = json.loads(out)
    assert report["text"] == "It is now."
    assert report["session"].startswith("oneshot:")
    assert [(c["name"], c["status"]) for c in report["tool_calls"]] == [("now", "completed")]
    assert report["continuation"] is None


async def test_oneshot_without_wait_stops_at_the_first_wait_and_resumes(fake: FakeAnthropic, tmp_path: Path) -> None:
    fake.script(Reply.tools(tool_use("sleep_for", {"seconds": 60}), tool_use("now", {}), text="Working."))
    env = bot_env(fake, tmp_path)
    code, out, err = await run_bot("oneshot", "sleep a minute", env=env, cwd=tmp_path)
    assert code == 0, err
    report = json.loads(out)
    statuses = {c["name"]: c["status"] for c in report["tool_calls"]}
    assert statuses == {"sleep_for": "running", "now": "completed"}
    assert report["text"] == "Working."
    assert report["continuation"]
    assert len(fake.requests) == 1

    fake.script(Reply.text_only("The sleep was lost when the process exited."))
    code, out, err = await run_bot("oneshot", "--resume", report["continuation"], env=env, cwd=tmp_path)
    assert code == 0, err
    resumed = json.loads(out)
    assert resumed["session"] == report["session"]
    assert {c["name"]: c["status"] for c in resumed["tool_calls"]} == {"sleep_for": "orphaned"}
    note = "\n".join(user_texts(fake.requests[-1]))
    assert "[background tool result] sleep_for" in note and "orphaned" in note
    assert fake.rejections == []


async def test_oneshot_wait_for_async_waits_for_background_calls(fake: FakeAnthropic, tmp_path: Path) -> None:
    fake.script(
        Reply.tools(tool_use("sleep_for", {"seconds": 1}), tool_use("now", {}), text="Sleeping."),
        Reply.text_only("Now is known; the sleep still runs."),
        Reply.text_only("The sleep finished."),
    )
    env = bot_env(fake, tmp_path, BOT_YIELD_STRATEGY="on_any_progress")
    code, out, err = await run_bot("oneshot", "--wait-for-async", "sleep and tell time", env=env, cwd=tmp_path)
    assert code == 0, err
    report = json.loads(out)
    assert {c["name"]: c["status"] for c in report["tool_calls"]} == {"sleep_for": "completed", "now": "completed"}
    assert "The sleep finished." in report["text"]
    assert "Sleeping.\nNow is known" in report["text"], "each model call's text on a line of its own"
    assert " INFO " not in err, err
    assert "[background tool result] sleep_for" in "\n".join(user_texts(fake.requests[-1]))
    assert fake.rejections == []


async def test_bad_configuration_is_one_line(fake: FakeAnthropic, tmp_path: Path) -> None:
    env = bot_env(fake, tmp_path, BOT_YIELD_STRATEGY="sometimes")
    code, _, err = await run_bot("oneshot", "hi", env=env, cwd=tmp_path)
    assert code == 2
    assert err.strip().splitlines() == [
        "threadbot: configuration error: BOT_YIELD_STRATEGY: unknown strategy 'sometimes';"
        " use when_all_done, on_any_progress or on_timeout:MS"
    ]


async def test_oneshot_model_overloaded_gives_json_error(fake: FakeAnthropic, tmp_path: Path) -> None:
    from fakes.anthropic_api import Failure

    fake.default = Failure(529)
    code, out, _ = await run_bot("oneshot", "hi", env=bot_env(fake, tmp_path), cwd=tmp_path)
    assert code == 1
    assert "overloaded" in json.loads(out)["error"]


async def test_console_keeps_every_line_typed_between_turns(fake: FakeAnthropic, tmp_path: Path) -> None:
    fake.script(Reply.text_only("First answer."), Reply.text_only("Second answer."))
    process = await start_console(fake, tmp_path)
    assert process.stdin is not None and process.stdout is not None
    for line, answer in ((b"one\n", b"First answer."), (b"two\n", b"Second answer.")):
        process.stdin.write(line)
        await process.stdin.drain()
        while answer not in (got := await asyncio.wait_for(process.stdout.readline(), START_S)):
            assert got, "the console exited early"
    process.stdin.close()
    assert await asyncio.wait_for(process.wait(), START_S) == 0
    # "two" may land just before the first turn has fully ended (then it is a note to that turn): never lost.
    assert [typed(user_texts(request)[-1]).removeprefix("[mid-turn user note] ") for request in fake.requests] == [
        "one",
        "two",
    ]


async def test_oneshot_fires_no_other_sessions_wait_and_makes_no_call_on_exit(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    env = bot_env(fake, tmp_path, BOT_ENABLE_SHELL="1", BOT_MIN_WAIT_S="0.1")
    stubborn = tool_use("run_command", {"command": "trap '' TERM; sleep 30"})
    wait = tool_use("wait_for", {"seconds": 0.1, "reason": "check A"})
    fake.script(Reply.tools(wait, stubborn, text="Waiting."))
    code, out, err = await run_bot("oneshot", "--session", "A", "wait a bit", env=env, cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["continuation"]
    assert len(fake.requests) == 1, "the orphaned command must not start a hidden turn as oneshot exits"

    fake.script(Reply.text_only("B answer"))
    code, out, err = await run_bot("oneshot", "--session", "B", "hi", env=env, cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["text"] == "B answer", "A's due wait must not run inside B's process"
    assert len(fake.requests) == 2 and fake.rejections == []


def typed(text: str) -> str:
    """A console line without its speaker tag (the local user, whoever runs the tests), to compare its words."""
    return re.sub(r'<message from="local:[^"]*" name="[^"]*">(.*)</message>', r"\1", text, flags=re.S)
