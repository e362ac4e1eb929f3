"""Model-facing names for MCP tools: `mcp__<server>__<tool>`, as Claude Code spells them.

The Messages API accepts `^[a-zA-Z0-9_-]{1,64}$`. A server may use other characters
or longer names, so those are replaced and, when the result is too long or would
collide, a short hash of the original pair makes it unique. The hash is of the
server's and tool's own names, so a tool keeps its model name across restarts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

MAX_NAME_CHARS = 64
HASH_CHARS = 8
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")


def _hashed(base: str, server: str, tool: str) -> str:
    digest = hashlib.sha256(f"{server}\x00{tool}".encode()).hexdigest()[:HASH_CHARS]
    return f"{base[: MAX_NAME_CHARS - HASH_CHARS - 1]}_{digest}"


def model_tool_names(server: str, tools: Iterable[str], taken: Iterable[str] = ()) -> dict[str, str]:
    """The model name for each of `server`'s tools, unique among themselves and against `taken`.

    Tools are named in sorted order, so which of two colliding tools keeps the plain
    name does not depend on the order the server lists them in.
    """
    used = set(taken)
    names: dict[str, str] = {}
    for tool in sorted(set(tools)):
        name = f"mcp__{server}__{_NOT_ALLOWED.sub('_', tool)}"
        if len(name) > MAX_NAME_CHARS or name in used:
            name = _hashed(name, server, tool)
        used.add(name)
        names[tool] = name
    return names
