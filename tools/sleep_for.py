"""`sleep_for`: waits, reporting each second; the reference long-running async tool."""

from __future__ import annotations

import asyncio
from typing import Any

from tools.base import ToolContext, ToolKind, tool

MAX_SLEEP_S = 24 * 3600


@tool(
    "sleep_for",
    "Sleep for a number of seconds, reporting progress every second. Useful to wait for something.",
    {"seconds": {"type": "number", "minimum": 0, "maximum": MAX_SLEEP_S, "description": "How long to sleep."}},
    required=("seconds",),
    kind=ToolKind.IO,
)
async def sleep_for(args: dict[str, Any], ctx: ToolContext) -> str:
    # An async sleep is cancelled at once by Task.cancel(), which is what makes
    # the 100 ms cancel promise hold; the one-second steps are only for progress.
    total = float(args["seconds"])
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + total
    while (remaining := deadline - loop.time()) > 0:
        await asyncio.sleep(min(1.0, remaining))
        slept = min(total, loop.time() - start)
        ctx.progress({"slept_s": round(slept, 1), "total_s": total, "message": f"slept {slept:.0f}s of {total:g}s"})
    return f"slept for {total:g}s"
