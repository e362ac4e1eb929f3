"""`share_file`: the model hands the people a file (a report, a CSV, code, a long log) instead of a wall of text."""

from __future__ import annotations

import mimetypes
from pathlib import PurePosixPath
from typing import Any

from tools.base import ToolContext, ToolError, tool

MAX_NAME_CHARS = 120


@tool(
    "share_file",
    "Share a text file with the people in this conversation (in Slack it is uploaded in the thread). "
    "Use it for output they asked to see as a file, or that is too long to read as a message: "
    "a report, a CSV, code, a log.",
    {
        "name": {"type": "string", "description": "File name with an extension, e.g. report.md or data.csv."},
        "content": {"type": "string", "description": "The file's text."},
    },
    required=("name", "content"),
    quick=True,
)
def share_file(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    name = PurePosixPath(str(args["name"]).replace("\\", "/")).name.strip()
    if not name or name in (".", ".."):
        raise ToolError("name must be a file name such as report.md")
    if len(name) > MAX_NAME_CHARS:
        raise ToolError(f"name is longer than {MAX_NAME_CHARS} characters")
    data = str(args["content"]).encode()
    if not data:
        raise ToolError("content is empty; there is nothing to share")
    mimetype = mimetypes.guess_type(name)[0] or "text/plain"
    ctx.share_file(name, data, mimetype)
    return {"shared": name, "bytes": len(data)}
