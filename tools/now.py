"""`now`: the current time, so the model never guesses the date."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tools.base import ToolContext, tool


@tool("now", "Current date and time, ISO 8601 with the time zone.", quick=True)
def now(args: dict[str, Any], ctx: ToolContext) -> str:
    return datetime.now(ctx.zone).astimezone(ctx.zone).isoformat(timespec="seconds")
