"""How big a request is, and the mechanical ways to make a history smaller.

Pure functions over the message list, so the rules are easy to test; the model
call that writes a summary lives in `compaction.py`. Every change here keeps the
history valid for the API: a stubbed tool result is still the result of its
`tool_use`, and a cut is made only before a person's own message, never between
a `tool_use` and its result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bot.agent.protocol import truncate
from bot.types import JSON, Message

CHARS_PER_TOKEN = 3.5
"""Until the API has counted a request of this turn: a little more tokens than English prose needs."""
STUB_PREFIX = "[cleared to save context]"
LATE_RESULT_PREFIX = "[background tool result]"
STUB_MIN_CHARS = 300
"""Results shorter than this cost less than the stub is worth; they stay."""
SUMMARY_PREFIX = "[summary of the earlier conversation]"


@dataclass(frozen=True, slots=True)
class ContextSettings:
    window_tokens: int
    """The model's context window."""
    compact_at: float
    """Share of the window past which the history is shrunk before the next request."""
    max_input_chars: int
    """A single text (a pasted message, a file) longer than this is truncated with a note."""
    keep_recent: int = 2
    """User messages at the end whose tool results are never stubbed: what the model is working on now."""

    @property
    def budget_tokens(self) -> int:
        return int(self.window_tokens * self.compact_at)


class SizeEstimate:
    """Tokens from characters, at the ratio the API's own count of the last request showed."""

    def __init__(self) -> None:
        self._tokens_per_char = 1 / CHARS_PER_TOKEN

    def learn(self, chars: int, tokens: int) -> None:
        if chars > 0 and tokens > 0:
            self._tokens_per_char = tokens / chars

    def tokens(self, chars: int) -> int:
        return int(chars * self._tokens_per_char)

    def chars(self, tokens: int) -> int:
        return int(tokens / self._tokens_per_char)


IMAGE_CHARS = int(1_600 * CHARS_PER_TOKEN)
"""An image costs the model about 1,600 tokens whatever its size in base64 (the API scales large ones down)."""
DOCUMENT_CHARS_PER_BYTE = 0.1
"""A PDF costs about 2,000 tokens a page, a page being some 70 KB of file: a tenth of a character per byte."""


def request_chars(system: str, tools: list[dict[str, JSON]], messages: list[Message]) -> int:
    """The request's size in characters of JSON, images and PDFs counted by what they cost, not their base64."""
    size = len(json.dumps([system, tools, messages], ensure_ascii=False))
    for block in _media_blocks(messages):
        data = str(block.get("source", {}).get("data", ""))
        cost = IMAGE_CHARS if block["type"] == "image" else int(len(data) * 3 / 4 * DOCUMENT_CHARS_PER_BYTE)
        size += cost - len(data)
    return size


def _media_blocks(messages: list[Message]) -> list[dict[str, JSON]]:
    """Base64 image and document blocks, at the top of a message or inside a tool result."""
    found: list[dict[str, JSON]] = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            continue
        for block in content:
            inner = block.get("content") if block.get("type") == "tool_result" else None
            for item in [block, *(inner if isinstance(inner, list) else [])]:
                if item.get("type") in ("image", "document") and item.get("source", {}).get("type") == "base64":
                    found.append(item)
    return found


def truncate_inputs(messages: list[Message], start: int, max_chars: int) -> bool:
    """Cut text blocks of user messages from `start` on to `max_chars`; True when one was cut."""
    changed = False
    for message in messages[start:]:
        if message["role"] != "user":
            continue
        if isinstance(message["content"], str):
            if len(message["content"]) > max_chars:
                message["content"] = truncate(message["content"], max_chars)
                changed = True
            continue
        for block in message["content"]:
            if block.get("type") == "text" and len(block["text"]) > max_chars:
                block["text"] = truncate(block["text"], max_chars)
                changed = True
    return changed


def stub_old_results(messages: list[Message], keep_recent: int) -> bool:
    """Replace big tool results and background-result notes, except in the last `keep_recent` user messages,
    by one line that keeps the call's name, status and the start of its result; True when one was replaced."""
    names = {
        block["id"]: block.get("name", "?")
        for message in messages
        if message["role"] == "assistant" and not isinstance(message["content"], str)
        for block in message["content"]
        if block.get("type") == "tool_use"
    }
    users = [message for message in messages if message["role"] == "user" and not isinstance(message["content"], str)]
    changed = False
    for message in users[: max(0, len(users) - keep_recent)]:
        for block in message["content"]:
            if block.get("type") == "tool_result" and _size(block.get("content")) >= STUB_MIN_CHARS:
                status = "failed" if block.get("is_error") else "completed"
                name = names.get(block.get("tool_use_id", ""), "?")
                block["content"] = f"{STUB_PREFIX} {name} {status}: {_first_line(block.get('content'))}"
                changed = True
            elif _is_late_result(block) and len(block["text"]) >= STUB_MIN_CHARS:
                header, _, rest = block["text"].partition("\n")
                block["text"] = f"{header}\n{STUB_PREFIX} {_first_line(rest)}"
                changed = True
    return changed


def summary_cut(messages: list[Message], keep_chars: int) -> int | None:
    """Where the part to summarise ends: the earliest person's message after which the tail fits `keep_chars`,
    else the latest one (the current turn is always kept); None when there is nothing before it to summarise."""
    starts = [i for i, message in enumerate(messages) if i > 0 and _is_plain_user(message)]
    if not starts:
        return None
    for index in starts:
        if request_chars("", [], messages[index:]) <= keep_chars:
            return index
    return starts[-1]


def _is_late_result(block: dict[str, JSON]) -> bool:
    return block.get("type") == "text" and str(block.get("text", "")).startswith(LATE_RESULT_PREFIX)


def _is_plain_user(message: Message) -> bool:
    """A message a person (or a wake-up) wrote, not one that answers tool calls."""
    if message["role"] != "user":
        return False
    content = message["content"]
    return isinstance(content, str) or not any(block.get("type") == "tool_result" for block in content)


def _size(content: JSON) -> int:
    return len(content) if isinstance(content, str) else len(json.dumps(content, ensure_ascii=False))


def _first_line(content: JSON) -> str:
    if isinstance(content, list):
        content = " ".join(block.get("text", "") for block in content if isinstance(block, dict))
    text = str(content or "").strip()
    line = text.splitlines()[0] if text else ""
    return line[:120] + ("…" if len(line) > 120 or len(text) > len(line) else "")
