"""`wordcount`: words in a text, counted the way `str.split` sees them."""

from __future__ import annotations

from typing import Any

from tools.base import ToolContext, tool


@tool(
    "wordcount",
    "Count the words in a text.",
    {"text": {"type": "string", "description": "The text to count."}},
    required=("text",),
    quick=True,
)
def wordcount(args: dict[str, Any], ctx: ToolContext) -> dict[str, int]:
    return {"words": len(args["text"].split())}
