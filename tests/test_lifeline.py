"""`run_command`'s lifeline: when the process that ran the command dies (SIGKILL included), so does the group.

A tiny host process runs the tool and is then killed with SIGKILL, so no Python code of it can clean up;
only the kernel closing the lifeline pipe is left to end the command, its children and grandchildren.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from proc_groups import ECHO_PGID, assert_group_gone, live_members

from tools.run_command import KILL_GRACE_S

ROOT = Path(__file__).resolve().parents[1]
HOST = """
import asyncio, sys
from pathlib import Path
from tools.base import ToolContext
from tools.run_command import shell_tool
from tools.sandbox import Sandbox, ShellPolicy

run_command = shell_tool(ShellPolicy(sandbox=Sandbox.NONE))  # its group ids, as seen from outside

def report(kind, payload):
    print(payload, flush=True)

async def main():
    ctx = ToolContext("toolu_host", "host", Path(sys.argv[2]), report, asyncio.get_running_loop())
    await run_command.run({"command": sys.argv[1]}, ctx)

asyncio.run(main())
"""
LIFELINE_S = 5.0
"""The watcher acts at once; this is room for a loaded machine, not a measured figure."""


async def _host_killed_mid_command(tmp_path: Path, command: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    host = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOST, command, str(tmp_path), stdout=asyncio.subprocess.PIPE, env=env
    )
    assert host.stdout is not None
    line = await asyncio.wait_for(host.stdout.readline(), 30)
    assert line.startswith(b"pgid "), line
    pgid = int(line.split()[1])
    await asyncio.wait_for(host.stdout.readline(), 30)  # the command's children are started
    assert len(live_members(pgid)) >= 4
    host.kill()
    await host.wait()
    return pgid


async def test_the_group_dies_with_its_daemon(tmp_path: Path) -> None:
    pgid = await _host_killed_mid_command(tmp_path, f"{ECHO_PGID}; sleep 600 & sleep 600 & echo started; wait")
    await assert_group_gone(pgid, live_within_s=LIFELINE_S)


@pytest.mark.timeout(60)
async def test_a_member_that_ignores_sigterm_gets_sigkill(tmp_path: Path) -> None:
    command = f"trap '' TERM; {ECHO_PGID}; sleep 600 & echo started; wait"
    pgid = await _host_killed_mid_command(tmp_path, command)
    await assert_group_gone(pgid, live_within_s=KILL_GRACE_S + LIFELINE_S)
