"""`run_command`: a shell command in its own process group, output lines streamed as progress.

The reference for cancelling real work: the whole process group gets SIGTERM,
then SIGKILL after a short grace, so children of the shell die too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

from tools.base import ToolContext, ToolError, ToolKind, tool

KILL_GRACE_S = 2.0
OUTPUT_KEEP_CHARS = 16_000
DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 3600
LINE_LIMIT_BYTES = 1 << 20


@tool(
    "run_command",
    "Run a shell command in the bot's work directory. Output lines are reported as progress; "
    "the result holds the exit code and the tail of the output.",
    {
        "command": {"type": "string", "minLength": 1, "description": "The shell command line."},
        "timeout_seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S},
    },
    required=("command",),
    kind=ToolKind.PROCESS,
)
async def run_command(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    process = await asyncio.create_subprocess_shell(
        args["command"],
        cwd=ctx.work_dir,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        limit=LINE_LIMIT_BYTES,
    )
    output = _Tail(OUTPUT_KEEP_CHARS)
    timeout_s = float(args.get("timeout_seconds", DEFAULT_TIMEOUT_S))
    finished = False
    try:
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
