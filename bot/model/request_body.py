"""A model request's bytes, written once for what stays the same and per request only for the history.

The SDK would copy the whole body into fresh containers (`copy_tree`) and serialize it with a Python
encoder subclass on every send, tools and system prompt included; a thread's tool turn sends the same
20 tools and the same system prompt each time. Here the body is JSON text handed to the SDK as bytes:
the system blocks (with their cache mark) and the tool definitions are serialized once and reused,
and only the messages, marked for the cache as `bot.model.caching` says, are serialized per request.
The encoding is the SDK's own (`ensure_ascii=False`, compact separators, no NaN), so text that UTF-8
cannot carry still fails with `UnicodeEncodeError` before anything is sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from typing import Any

from bot.model.caching import CacheTTL, mark_messages, system_blocks
from bot.types import JSON, ModelRequest

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
MEMO_SIZE = 64
"""Distinct system prompts and tool lists kept serialized: a daemon has a handful (the prompt changes with the
date, the tools with what the policy hides from an asker and what MCP servers offer)."""


class _Memo:
    """Serialized fragments by key, the oldest dropped past `MEMO_SIZE`; each entry keeps what it was made of
    alive, so that keys holding `id()`s of its parts cannot be reused by other objects meanwhile."""

    def __init__(self) -> None:
        self._items: dict[Hashable, tuple[object, bytes]] = {}

    def get(self, key: Hashable, source: Any, make: Callable[[Any], str]) -> bytes:
        found = self._items.get(key)
        if found is None:
            found = (source, make(source).encode())
            if len(self._items) >= MEMO_SIZE:
                del self._items[next(iter(self._items))]
            self._items[key] = found
        return found[1]


def _tools_key(tools: list[dict[str, JSON]]) -> Hashable:
    """Tool definitions by content for their strings (names, descriptions: compared at the cost of a
    pointer when they are the same objects) and by identity for their schemas: `Tool.spec()` builds a
    fresh dict per request around the tool's one schema object, which nothing changes once declared."""
    return tuple(tuple((k, v if type(v) is str else id(v)) for k, v in spec.items()) for spec in tools)


class RequestBody:
    """Writes `ModelRequest`s for one model and cache setting as the JSON bytes of a streamed request."""

    def __init__(self, *, model: str, cache_ttl: CacheTTL | None) -> None:
        self._head = '{"model":' + _encode(model) + ',"stream":true,"max_tokens":'
        self._cache_ttl = cache_ttl
        self._systems = _Memo()
        self._tools = _Memo()

    def __call__(self, request: ModelRequest, max_tokens: int) -> bytes:
        parts = [self._head.encode(), str(max_tokens).encode()]
        if request.system:
            system = self._systems.get(request.system, request.system, self._system)
            parts += [b',"system":', system]
        if request.tools:
            parts += [b',"tools":', self._tools.get(_tools_key(request.tools), request.tools, _encode)]
        if request.tool_choice:
            parts += [b',"tool_choice":', _encode(request.tool_choice).encode()]
        messages = mark_messages(request.messages, self._cache_ttl)
        parts += [b',"messages":', _encode(messages).encode(), b"}"]
        return b"".join(parts)

    def _system(self, system: str) -> str:
        return _encode(system_blocks(system, self._cache_ttl))
