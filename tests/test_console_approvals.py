"""Approvals where nobody clicks: the console asks y/N without eating typed text; oneshot denies unless
`--approve`; `threadbot audit` prints the trail they leave. Real processes, the fake Messages API."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fakes.anthropic_api import FakeAnthropic, Reply, tool_results, tool_use, user_texts
from test_console import START_S, bot_env, run_bot, spawn_bot

SHELL = {"BOT_ENABLE_SHELL": "1", "BOT_SHELL_SANDBOX": "none", "BOT_POLICY_FILE": ""}
"""The built-in policy (no BOT_POLICY_FILE): run_command asks. No sandbox: these tests are about the asking."""


async def read_until(stream: asyncio.StreamReader, needle: bytes) -> bytes:
    seen = b""
    while needle not in seen:
        line = await asyncio.wait_for(stream.readline(), START_S)
        assert line, f"the output ended before {needle!r}; it said: {seen.decode()}"
        seen += line
    return seen


async def test_the_console_asks_and_a_line_that_is_no_answer_goes_to_the_agent(
    fake: FakeAnthropic, tmp_path: Path
) -> None:
    echo = tool_use("run_command", {"command": "echo approved-at-the-console"})
    fake.script(Reply.tools(echo), Reply.text_only("Waiting."), Reply.text_only("Echoed."))
    process = await spawn_bot("console", env=bot_env(fake, tmp_path, **SHELL), cwd=tmp_path)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b"echo something\n")
    await process.stdin.drain()
    asked = await read_until(process.stdout, b"approve? y/N")
    assert b"echo approved-at-the-console" in asked, "the exact command is shown"
    process.stdin.write(b"by the way, it is for the report\ny\n")
    await process.stdin.drain()
    await read_until(process.stdout, b"assistant: Echoed.")
    process.stdin.close()
    await asyncio.wait_for(process.wait(), START_S)
    requests = fake.requests
    assert "awaiting_approval" in str(tool_results(requests[1])[echo["id"]]), "the note made the turn yield"
    assert any("approved-at-the-console" in str(request["messages"]) for request in requests[2:])
    notes = [text for request in requests for text in user_texts(request)]
    assert any("by the way, it is for the report" in text for text in notes), "the typed line reached the agent"
    assert not any(text.strip().endswith("y") and "note" in text for text in notes), "the answer did not"


@pytest.mark.parametrize("approve", [False, True])
async def test_oneshot_denies_unless_told_to_approve(fake: FakeAnthropic, tmp_path: Path, approve: bool) -> None:
    marker = tmp_path / "ran"
    touch = tool_use("run_command", {"command": f"touch {marker}"})
    fake.script(Reply.tools(touch), Reply.text_only("Done."))
    args = ["oneshot", "touch the marker", "--wait-for-async", *(["--approve"] if approve else [])]
    code, out, err = await run_bot(*args, env=bot_env(fake, tmp_path, **SHELL), cwd=tmp_path)
    assert code == 0, err
    [call] = json.loads(out)["tool_calls"]
    result = str(tool_results(fake.requests[1])[touch["id"]])
    if approve:
        assert call["status"] == "completed" and marker.exists()
    else:
        assert call["status"] == "failed" and not marker.exists()
        assert "denied by oneshot without --approve (nobody is there to approve it)" in result


async def test_audit_prints_each_call_with_its_decision(fake: FakeAnthropic, tmp_path: Path) -> None:
    env = bot_env(fake, tmp_path, **SHELL)
    fake.script(Reply.tools(tool_use("now", {})), Reply.text_only("Now."))
    assert (await run_bot("oneshot", "the time", env=env, cwd=tmp_path))[0] == 0
    fake.script(Reply.tools(tool_use("run_command", {"command": "echo audited"})), Reply.text_only("Ran."))
    assert (await run_bot("oneshot", "echo it", "--approve", "--wait-for-async", env=env, cwd=tmp_path))[0] == 0
    code, out, err = await run_bot("audit", "--json", env=env, cwd=tmp_path)
    assert code == 0, err
    now, shell = [json.loads(line) for line in out.splitlines()]
    assert (now["tool"], now["decision"], now["decided_by"], now["outcome"]) == (
        "now",
        "allowed",
        "built-in: allowed",
        "completed",
    )
    assert shell["arguments"] == {"command": "echo audited"}
    assert (shell["decision"], shell["decided_by"], shell["outcome"]) == ("approved", "oneshot --approve", "completed")
    assert {"call_id", "tool", "arguments", "requester", "decision", "decided_by", "outcome", "at"} <= shell.keys()
    code, out, _ = await run_bot("audit", "--tool", "run_*", env=env, cwd=tmp_path)
    assert code == 0 and "run_command(command=echo audited)" in out and "now()" not in out
    code, out, _ = await run_bot("audit", "--since", "soon", env=env, cwd=tmp_path)
    assert code == 2 and "--since 'soon'" in out


async def test_the_console_prompts_a_question_and_a_number_answers_it(fake: FakeAnthropic, tmp_path: Path) -> None:
    ask = tool_use("ask_user", {"question": "Which colour?", "options": ["red", "blue"]})
    fake.script(Reply.tools(ask), Reply.text_only("Asked."), Reply.text_only("Noted."), Reply.text_only("Blue."))
    process = await spawn_bot("console", env=bot_env(fake, tmp_path), cwd=tmp_path)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b"paint the shed\n")
    await process.stdin.drain()
    asked = await read_until(process.stdout, b"anything else goes to the agent")
    assert b"Which colour?" in asked and b"1. red" in asked and b"2. blue" in asked
    await read_until(process.stdout, b"assistant: Asked.")
    process.stdin.write(b"the shed is at the back\n")  # not an option: a message for the agent
    await process.stdin.drain()
    await read_until(process.stdout, b"assistant: Noted.")
    process.stdin.write(b"2\n")
    await process.stdin.drain()
    await read_until(process.stdout, b"assistant: Blue.")
    process.stdin.close()
    await asyncio.wait_for(process.wait(), START_S)
    late = json.dumps(fake.requests[3]["messages"][-1])
    assert "finished: completed" in late and '\\"answer\\": \\"blue\\"' in late, late


async def test_oneshot_leaves_a_question_waiting_and_resume_answers_it(fake: FakeAnthropic, tmp_path: Path) -> None:
    env = bot_env(fake, tmp_path)
    ask = tool_use("ask_user", {"question": "Which branch?"})
    fake.script(Reply.tools(ask))
    code, out, err = await run_bot("oneshot", "deploy", env=env, cwd=tmp_path)
    assert code == 0, err
    report = json.loads(out)
    [call] = report["tool_calls"]
    assert (call["name"], call["status"]) == ("ask_user", "awaiting_answer") and report["continuation"]
    fake.script(Reply.text_only("Deploying main."))
    code, out, err = await run_bot(
        "oneshot", "--resume", report["continuation"], "--answer", "main", env=env, cwd=tmp_path
    )
    assert code == 0, err
    resumed = json.loads(out)
    assert resumed["text"] == "Deploying main."
    [again] = resumed["tool_calls"]
    assert (again["status"], again["result"]["answer"], again["result"]["answered_by"]) == (
        "completed",
        "main",
        "oneshot --answer",
    )
    assert '\\"answer\\": \\"main\\"' in json.dumps(fake.requests[-1]["messages"])


async def test_oneshot_answer_without_a_waiting_question_is_an_error(fake: FakeAnthropic, tmp_path: Path) -> None:
    code, out, err = await run_bot("oneshot", "hello", "--answer", "yes", env=bot_env(fake, tmp_path), cwd=tmp_path)
    assert code == 1, err
    assert json.loads(out) == {"error": "--answer needs a question to answer: --resume TOKEN of a run that asked one"}
    assert fake.requests == [], "nothing was asked of the model"
