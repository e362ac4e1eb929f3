"""At start, process groups that orphaned calls left running are killed; anyone else's are left alone.

The groups here are started by the test itself (a `sleep` in a new session), standing for what a
daemon killed with SIGKILL could leave behind when even its lifeline watcher is gone.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from conftest import CoreFactory

from bot.calls import process_groups
from bot.store import ProcessGroupRecord, SqliteStore
from bot.toolcall import CallStatus, ToolCall

KEY = "test:procs"
DEAD_OWNER = "999999999:gone"
"""A daemon that no longer runs (no such pid)."""


@pytest.fixture
async def stray() -> AsyncIterator[asyncio.subprocess.Process]:
    """A process leading its own group, as run_command's supervisor does; always ended."""
    process = await asyncio.create_subprocess_exec("sleep", "600", start_new_session=True)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _record(data_dir: Path, pgid: int, *, leader: str | None, owner: str | None) -> None:
    """What a daemon wrote before it died: a running call and the group it started."""
    store = await SqliteStore.open(data_dir / "bot.db")
    try:
        await store.ensure_session(KEY)
        call = ToolCall("toolu_stray", KEY, f"{KEY}#1", "run_command", {"command": "sleep 600"})
        call.transition(CallStatus.RUNNING)
        await store.save_call(call)
        await store.record_process_group(ProcessGroupRecord(call.id, pgid, leader, owner))
    finally:
        await store.close()


async def test_a_left_over_group_is_killed_at_start(
    core_factory: CoreFactory, stray: asyncio.subprocess.Process, tmp_path: Path
) -> None:
    await _record(tmp_path, stray.pid, leader=process_groups.identity(stray.pid), owner=DEAD_OWNER)
    core = await core_factory()
    assert await asyncio.wait_for(stray.wait(), 5) == -signal.SIGTERM
    assert [call.id for call in core.orphans] == ["toolu_stray"]
    assert await core.store.process_groups() == []


async def test_a_term_ignoring_group_gets_sigkill(core_factory: CoreFactory, tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        "sh", "-c", "trap '' TERM; echo ready; sleep 600 & wait", start_new_session=True, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None and await process.stdout.readline() == b"ready\n"
        await _record(tmp_path, process.pid, leader=process_groups.identity(process.pid), owner=DEAD_OWNER)
        await core_factory()
        assert await asyncio.wait_for(process.wait(), 5) == -signal.SIGKILL
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.parametrize(
    ("leader", "owner", "why"),
    [
        ("some-boot:12345", DEAD_OWNER, "the pid now leads someone else's group"),
        (None, DEAD_OWNER, "nothing proves the group is ours"),
        ("mine", "alive", "the daemon that started it still runs"),
    ],
)
async def test_a_group_that_is_not_a_left_over_is_not_touched(
    core_factory: CoreFactory,
    stray: asyncio.subprocess.Process,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    leader: str | None,
    owner: str,
    why: str,
) -> None:
    signals: list[tuple[int, int]] = []
    real_killpg = os.killpg

    def recording_killpg(pgid: int, sig: int) -> None:
        signals.append((pgid, sig))
        real_killpg(pgid, sig)

    monkeypatch.setattr(process_groups.os, "killpg", recording_killpg)
    if leader == "mine":
        leader = process_groups.identity(stray.pid)
    if owner == "alive":
        owner = process_groups.owner_token() or ""
    await _record(tmp_path, stray.pid, leader=leader, owner=owner)
    core = await core_factory()
    assert [sig for pgid, sig in signals if pgid == stray.pid and sig != 0] == [], why
    assert stray.returncode is None
    # A live daemon's record stays; a dead one's is dropped either way (its group is not ours to track).
    assert len(await core.store.process_groups()) == (1 if why.startswith("the daemon") else 0)
