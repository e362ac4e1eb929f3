"""Red team for the shell: the daemon as a process, the model scripted to probe from `run_command`.

The daemon runs with fake secrets in its environment and in a `.env` in its working directory (the data
dir, beside `bot.db` and `HEARTBEAT.md`). Every probe is judged on what the model gets back in its next
request, which is what an attacker steering the model would see. Under `CI` a missing bwrap fails these
tests: a sandbox that is never exercised is not known to work.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from daemon_rig import WAIT_S, World, mention, wait_text
from fakes.anthropic_api import Reply, tool_results, tool_use
from proc_groups import REAP_WAIT_S

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module"), pytest.mark.usefixtures("needs_bwrap")]

SECRETS = {
    "SLACK_BOT_TOKEN": "xoxb-test",  # the harness's fake token: it must not show either
    "ANTHROPIC_API_KEY": "sk-ant-fake-e2e-key",
    "DATABASE_URL": "postgresql://bot:pw-e2e-db@db/bot",
    "PGPASSWORD": "pg-e2e-password",
}
DOTENV_SECRET = "dotenv-e2e-signing-secret"
HEARTBEAT = "- [ ] the operator's real heartbeat task\n"
MARKER_SLEEP = "613.25"
"""A sleep no other test runs, so its processes can be found in /proc."""


def _result_text(request: dict[str, Any], use: dict[str, Any]) -> str:
    content = tool_results(request)[use["id"]]
    return content if isinstance(content, str) else json.dumps(content)


async def _probe(world: World, words: str, commands: list[str]) -> list[str]:
    """Mention the bot with `words`; the model runs each command at once; returns what each call gave back."""
    uses = [tool_use("run_command", {"command": command}) for command in commands]
    world.script.add(words, Reply.tools(*uses), Reply.text_only(f"done: {words}"))
    event = await mention(world.slack, world.channel, words)
    await wait_text(world.slack, world.channel, event["ts"], f"done: {words}")
    follow_up = world.requests(words)[1]
    return [_result_text(follow_up, use) for use in uses]


async def test_commands_see_no_secret_no_daemon_file_and_no_other_session(own: World) -> None:
    data = own.daemon.data_dir
    own.daemon.env.update(SECRETS, BOT_ENABLE_SHELL="1", BOT_SHELL_ENV="SAFE_VAR", SAFE_VAR="visible-e2e")
    (data / ".env").write_text(f"SLACK_SIGNING_SECRET={DOTENV_SECRET}\nOTHER_DOTENV_SECRET={DOTENV_SECRET}\n")
    (data / "HEARTBEAT.md").write_text(HEARTBEAT)
    await own.daemon.start()
    await own.daemon.connected()

    env, db, homes, heartbeat = await _probe(
        own,
        "red team A",
        [
            "env",
            f"cat {data}/bot.db || cat ../bot.db || cat {data}/.env || cat ../.env || echo all-refused",
            "ls -A ~; ls -A /root /home",
            f"echo pwned > {data}/HEARTBEAT.md; echo pwned > ../HEARTBEAT.md; echo secret-of-A > note.txt",
        ],
    )
    for value in [*SECRETS.values(), DOTENV_SECRET]:
        assert value not in env, (value, env)
    assert "SAFE_VAR=visible-e2e" in env and "HOME=/work" in env
    assert "all-refused" in db and "SQLite" not in db and DOTENV_SECRET not in db
    assert "/root" in homes and "/home" in homes and "No such file" in homes
    assert (data / "HEARTBEAT.md").read_text() == HEARTBEAT
    assert "pwned" not in "".join(path.read_text(errors="replace") for path in data.glob("*.md"))
    assert "exit_code" in heartbeat  # it ran; whatever it wrote went to the sandbox's throwaway root
    [written] = list((data / "work").glob("*/note.txt"))
    assert written.read_text() == "secret-of-A\n"

    [peek] = await _probe(
        own, "red team B", ["cat ../*/note.txt; ls -A /work; echo found=$(find / -name note.txt 2>/dev/null | wc -l)"]
    )
    assert "secret-of-A" not in peek and "found=0" in peek
    assert len(list((data / "work").iterdir())) == 2  # one dir per session


def _marked_sleeps() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == f"sleep\0{MARKER_SLEEP}\0".encode():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


async def test_a_killed_daemon_leaves_no_sandboxed_command_running(own: World) -> None:
    own.daemon.env.update(BOT_ENABLE_SHELL="1")
    await own.daemon.start()
    await own.daemon.connected()
    use = tool_use("run_command", {"command": f"sleep {MARKER_SLEEP} & sleep {MARKER_SLEEP}; wait"})
    own.script.add("run forever", Reply.tools(use))
    await mention(own.slack, own.channel, "run forever")
    await own.slack.wait_for(lambda: len(_marked_sleeps()) == 2, WAIT_S, "both sandboxed sleeps running")
    assert own.daemon.process is not None
    own.daemon.process.kill()  # SIGKILL: only the lifeline (and bwrap's --die-with-parent) can end them
    await own.daemon.process.wait()
    await own.slack.wait_for(lambda: not _marked_sleeps(), WAIT_S + REAP_WAIT_S, "the sleeps gone")


async def test_no_sandbox_still_scrubs_the_environment_and_warns_at_start(own: World) -> None:
    own.daemon.env.update(SECRETS, BOT_ENABLE_SHELL="1", BOT_SHELL_SANDBOX="none")
    await own.daemon.start()
    await own.daemon.connected()
    assert "BOT_SHELL_SANDBOX=none: run_command sees every file the daemon can" in own.daemon.log()
    [env] = await _probe(own, "red team none", ["env"])
    for value in SECRETS.values():
        assert value not in env, (value, env)
