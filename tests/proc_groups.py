"""Checking that a process group is really gone, for the cancel tests of subprocess tools.

A killed shell's children are re-parented to PID 1, and until PID 1 reaps them they linger as
zombies that still count for `os.killpg(pgid, 0)`. A zombie does no work, so "stopped" means: no
live member at once, and (once init has reaped) no member at all.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tools.run_command import shell_tool
from tools.sandbox import Sandbox, ShellPolicy

ECHO_PGID = "echo pgid $(cut -d' ' -f5 /proc/$$/stat)"
"""Shell that prints its process group: run_command's shell is not the group's leader (its supervisor is)."""
UNFENCED_SHELL = shell_tool(ShellPolicy(sandbox=Sandbox.NONE))
"""`run_command` outside bwrap (environment still scrubbed): a sandbox has its own pid namespace, where
the group id a command prints means nothing out here. tests/test_sandbox.py runs it fenced."""
REAP_WAIT_S = 5.0
"""Some inits (a container's PID 1) reap orphans only every couple of seconds."""


def group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def live_members(pgid: int) -> list[int]:
    """Pids of the group's members that are not zombies."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may hold spaces, so split after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


async def assert_group_gone(pgid: int, *, live_within_s: float = 0.5) -> None:
    """No live member within `live_within_s`, and the group itself gone once the zombies are reaped."""
    start = time.monotonic()
    while live := live_members(pgid):
        assert time.monotonic() - start < live_within_s, f"group {pgid} still has live processes {live}"
        await asyncio.sleep(0.01)
    while group_exists(pgid):
        assert time.monotonic() - start < REAP_WAIT_S, f"group {pgid} still exists (zombies never reaped)"
        await asyncio.sleep(0.02)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return
    raise AssertionError(f"group {pgid} exists")


async def cancel_and_assert_gone(task: asyncio.Task[object], pgid: int, *, stops_s: float) -> None:
    """Cancel a running command's task: it ends within `stops_s`, and its whole group with it."""
    start = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.perf_counter() - start < stops_s
    await assert_group_gone(pgid)
