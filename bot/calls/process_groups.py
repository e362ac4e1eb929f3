"""Telling our process groups from strangers', and killing what a crashed daemon left running.

A pid is only a number the kernel hands out again, so a group is recorded with
the identity of its first process (the boot it ran in and its start time, from
`/proc`): a group whose leader has another identity now is someone else's and is
left alone. While any member of a group lives, the kernel does not reuse its id,
so a group whose leader is gone but whose members live (the shell was killed,
`sleep 600` was not) is still ours, as long as the machine has not rebooted.
The daemon that ran the call is recorded the same way: a group whose daemon
still runs (another edge on the same data directory) is not an orphan.
Without `/proc` nothing can be proven, and nothing is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from pathlib import Path

from bot.store import ProcessGroupRecord

log = logging.getLogger(__name__)

KILL_GRACE_S = 2.0
_POLL_S = 0.05
_PROC = Path("/proc")


def _boot_id() -> str | None:
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def identity(pid: int) -> str | None:
    """`boot-id:start-time` of a live process, or None (no such process, or no `/proc` to ask)."""
    boot = _boot_id()
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    if boot is None:
        return None
    # pid (comm) state ppid ... ; comm may hold spaces, so count fields after the last ')'. starttime is field 22.
    fields = stat[stat.rindex(")") + 2 :].split()
    return f"{boot}:{fields[19]}"


def owner_token() -> str | None:
    """This process, as recorded with the groups it starts: `pid:identity`."""
    own = identity(os.getpid())
    return f"{os.getpid()}:{own}" if own is not None else None


def owner_alive(record: ProcessGroupRecord) -> bool:
    """Whether the daemon that started the group still runs (then the group is its business, not an orphan)."""
    if record.owner is None:
        return False
    pid, _, own = record.owner.partition(":")
    return pid.isdigit() and identity(int(pid)) == own


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_left_over(record: ProcessGroupRecord) -> bool:
    """Whether the group is still there, still ours, and its daemon is gone."""
    if record.leader is None or not _group_exists(record.pgid) or owner_alive(record):
        return False
    leader_now = identity(record.pgid)
    if leader_now is not None:
        return leader_now == record.leader
    return record.leader.split(":", 1)[0] == _boot_id()  # leader gone, members alive: ours unless rebooted


async def kill_left_over(records: list[ProcessGroupRecord], grace_s: float = KILL_GRACE_S) -> list[int]:
    """SIGTERM every left-over group, SIGKILL whatever is still alive after `grace_s`; returns the groups hit."""
    groups = [record.pgid for record in records if is_left_over(record)]
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    # Not our children, so no wait() and no event can tell when they are gone: look again until the grace is up.
    # This runs once, at start, for the few groups a crash left behind.
    deadline = time.monotonic() + grace_s
    while (alive := [pgid for pgid in groups if _has_live_member(pgid)]) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(_POLL_S)
    for pgid in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    if groups:
        log.info("killed %d process groups left running by a previous run: %s", len(groups), groups)
    return groups


def _has_live_member(pgid: int) -> bool:
    """Zombies still count for `killpg(pgid, 0)` until init reaps them; they do no work, so they do not count here."""
    if not _group_exists(pgid):
        return False
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False
