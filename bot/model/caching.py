"""Prompt-cache breakpoints: where a request marks the prefix the API may reuse.

The API caches the request prefix (tools, then system, then messages) up to each
block marked with `cache_control`, and a later request reads it back only when its
own prefix matches byte for byte up to one of its breakpoints. So every request
marks three places, well inside the API's limit of four:

1. the system prompt: tools and system, stable for the life of the process
   (the prompt carries the date, never the time, so it changes once a day at most);
2. the end of the previous request: in a thread that grows by (assistant reply,
   user content) pairs, that is the last block of the third message from the end,
   so this request reads what the previous one wrote, whether it was the previous
   iteration of the turn, the previous turn, or the turn before a wake-up;
3. the last block: what the next request will read.

Markers are put on copies: the stored history never carries them, so a message
is marked again, or not, by each request on its own.
"""

from __future__ import annotations

from typing import Literal

from bot.types import JSON, Message

CacheTTL = Literal["5m", "1h"]


def system_blocks(system: str, ttl: CacheTTL | None) -> list[dict[str, JSON]]:
    """The system prompt as one text block, marked when caching is on (an empty prompt is left out)."""
    if not system:
        return []
    block: dict[str, JSON] = {"type": "text", "text": system}
    if ttl is not None:
        block["cache_control"] = _marker(ttl)
    return [block]


def mark_messages(messages: list[Message], ttl: CacheTTL | None) -> list[Message]:
    """`messages` with breakpoints 2 and 3 above on copies of the marked messages."""
    if ttl is None or not messages:
        return messages
    marked = list(messages)
    targets = {len(messages) - 1}
    if len(messages) >= 3:
        targets.add(len(messages) - 3)
    for index in targets:
        marked[index] = _mark_last_block(messages[index], ttl)
    return marked


def _mark_last_block(message: Message, ttl: CacheTTL) -> Message:
    content = message["content"]
    blocks: list[dict[str, JSON]] = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    if not blocks:
        return message
    blocks[-1] = {**blocks[-1], "cache_control": _marker(ttl)}
    return {**message, "content": blocks}


def _marker(ttl: CacheTTL) -> dict[str, JSON]:
    # 5m is the API's default; spelling it out would change nothing but the bytes sent.
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}
