"""`run_command`: a shell command in its own process group, output lines streamed as progress.

The reference for cancelling real work: the whole process group gets SIGTERM,
then SIGKILL after a short grace, so children of the shell die too.

Nothing of the command outlives the daemon either, even a daemon killed with
SIGKILL. The command runs under a small supervising shell whose stdin is a
"lifeline" pipe only the daemon holds open. When the daemon dies, for any
reason, the kernel closes it; a watcher in the group reads end-of-file and sends
SIGTERM, then SIGKILL, to the whole group. `prctl(PR_SET_PDEATHSIG)` would only
reach the shell, not its children (the setting is not inherited across fork),
and it needs a `preexec_fn`, which is unsafe in a process with threads. The
group is also recorded with the call, so a start after a crash kills whatever
is left (a member that escaped its group with `setsid` escapes both).

What the command may see and reach (environment, files, network, limits) is the
`ShellPolicy` the tool is built with; `tools.sandbox` says how it is fenced.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

from tools.base import Tool, ToolContext, ToolError, ToolKind, tool
from tools.sandbox import ShellPolicy, environment, session_dir, wrap

KILL_GRACE_S = 2.0
OUTPUT_KEEP_CHARS = 16_000
DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 3600
LINE_LIMIT_BYTES = 1 << 20
# $1 is the command. fd 3 keeps the lifeline for the watcher; the command gets neither it nor stdin.
# The watcher ignores the group's SIGTERM so it can follow up with SIGKILL; it is killed when the command ends.
SUPERVISOR = f"""
exec 3<&0 0</dev/null
( trap '' TERM; read -r _ <&3; kill -TERM 0; sleep {KILL_GRACE_S:g}; kill -KILL 0 ) >/dev/null 2>&1 &
watcher=$!
/bin/sh -c "$1" 3<&- &
command=$!
exec 3<&-
wait "$command"
status=$?
kill -KILL "$watcher" 2>/dev/null
exit "$status"
"""


def shell_tool(policy: ShellPolicy) -> Tool:
    """The `run_command` tool, fenced as `policy` says."""

    @tool(
        "run_command",
        "Run a shell command in this conversation's own work directory (kept between calls). Output lines are "
        "reported as progress; the result holds the exit code and the tail of the output.",
        {
            "command": {"type": "string", "minLength": 1, "description": "The shell command line."},
            "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S},
        },
        required=("command",),
        kind=ToolKind.PROCESS,
    )
    async def run_command(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return await _run(policy, args, ctx)

    return run_command


async def _run(policy: ShellPolicy, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    work_dir = session_dir(ctx.work_dir, ctx.session_key)
    work_dir.mkdir(parents=True, exist_ok=True)
    argv, cwd, home = wrap(policy, ["/bin/sh", "-c", SUPERVISOR, "sh", args["command"]], work_dir)
    lifeline, keep_alive = os.pipe()  # both ends close on exec: only the supervisor's stdin gets one
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=environment(policy, home),
            stdin=lifeline,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            limit=LINE_LIMIT_BYTES,
        )
    except BaseException:
        os.close(keep_alive)
        raise
    finally:
        os.close(lifeline)
    output = _Tail(OUTPUT_KEEP_CHARS)
    timeout_s = float(args.get("timeout_seconds", DEFAULT_TIMEOUT_S))
    finished = False
    try:
        await ctx.track_process_group(process.pid)
        async with asyncio.timeout(timeout_s):
            await _stream_lines(process, ctx, output)
            code = await process.wait()
        finished = True
    except TimeoutError:
        raise ToolError(f"command timed out after {timeout_s:g}s") from None
    finally:
        # Whatever ended the wait early (cancel, timeout, a read error), nothing of the command outlives it.
        if not finished:
            await _terminate_group(process)
        os.close(keep_alive)
    return {"exit_code": code, "output": output.text, "truncated": output.truncated}


class _Tail:
    """The last `keep` characters of the output: a chatty command must not fill the daemon's memory."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self.text = ""
        self.truncated = False

    def add(self, line: str) -> None:
        self.text += line
        if len(self.text) > self._keep:
            self.text = self.text[-self._keep :]
            self.truncated = True


async def _stream_lines(process: asyncio.subprocess.Process, ctx: ToolContext, output: _Tail) -> None:
    assert process.stdout is not None
    try:
        async for raw in process.stdout:
            line = raw.decode(errors="replace")
            output.add(line)
            ctx.log(line.rstrip("\n"))
    except ValueError:  # asyncio's StreamReader refuses a line over its limit
        raise ToolError(f"the command wrote a line longer than {LINE_LIMIT_BYTES // 1024} KiB") from None


async def _terminate_group(process: asyncio.subprocess.Process) -> None:
    """SIGTERM the whole process group, then SIGKILL whatever is left after the grace period."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(process.wait()), KILL_GRACE_S)
    # The shell may be gone while its children linger in the group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
