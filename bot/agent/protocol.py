"""Keeping the conversation valid for the Messages API.

The API rejects a history where a `tool_use` lacks its `tool_result` in the very
next user message, where results do not come first, or where two user messages
sit side by side. Everything that writes user content goes through here.
"""

from __future__ import annotations

import json
import uuid

from bot.agent.fence import tool_output
from bot.agent.injections import Content
from bot.toolcall import JSON, CallStatus, ToolCall
from bot.types import Message
from tools.base import blocks_as_text, result_blocks

INJECTION_PREFIX = "[mid-turn user note]"
RUNNING_MESSAGE = (
    "Still running in the background. Its result will arrive in a later message; "
    "use get_tool_call_status to check on it or wait for it, or cancel_tool_call to stop it."
)

AWAITING_MESSAGE = (
    "Waiting for a person to approve it (the tool policy asks); it runs once approved, and its result, or "
    "the denial, will arrive in a later message. Use get_tool_call_status to check, or cancel_tool_call to "
    "withdraw it."
)
QUESTION_MESSAGE = (
    "The question is shown to the person; their answer will arrive in a later message as this call's result "
    "(or a timeout, if nobody answers in time). Go on with what does not need it, or end your turn. Use "
    "get_tool_call_status to check, or cancel_tool_call to withdraw the question."
)


def truncate(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[truncated: {len(text) - max_chars} more characters not shown]"


def render_result(value: JSON) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def truncate_blocks(blocks: list[dict[str, JSON]], max_chars: int) -> list[dict[str, JSON]]:
    """Content blocks with their text cut to `max_chars` in all, as a text result would be; images kept."""
    budget = max_chars
    kept: list[dict[str, JSON]] = []
    for block in blocks:
        if block.get("type") == "text":
            text = str(block.get("text", ""))
            kept.append(text_block(truncate(text, max(budget, 0))))
            budget -= len(text)
        else:
            kept.append(block)
    return kept


def call_outcome_text(call: ToolCall) -> str:
    """What the model reads for a final call."""
    if call.status is CallStatus.COMPLETED:
        blocks = result_blocks(call.result)
        return blocks_as_text(blocks) if blocks is not None else render_result(call.result)
    if call.status is CallStatus.CANCELLED:
        return f"cancelled by {call.cancelled_by}" if call.cancelled_by else "cancelled"
    if call.status is CallStatus.ORPHANED:
        return "orphaned: the process running this call stopped before it finished; it did not complete"
    return f"error: {call.error}"


def tool_result_block(call: ToolCall, max_chars: int) -> dict[str, JSON]:
    if not call.is_final:
        message = (
            (QUESTION_MESSAGE if call.is_question else AWAITING_MESSAGE) if call.awaiting_person else RUNNING_MESSAGE
        )
        placeholder = {"status": call.state, "tool_call_id": call.id, "message": message}
        return {"type": "tool_result", "tool_use_id": call.id, "content": json.dumps(placeholder)}
    blocks = result_blocks(call.result) if call.status is CallStatus.COMPLETED else None
    if blocks:
        content: JSON = fence_blocks(truncate_blocks(blocks, max_chars), call.tool_name)
    elif call.status in (CallStatus.COMPLETED, CallStatus.FAILED):  # an error quotes the tool (a server's words)
        content = tool_output(call.tool_name, truncate(call_outcome_text(call), max_chars))
    else:
        content = truncate(call_outcome_text(call), max_chars)  # our own words: a cancel, an orphan
    block: dict[str, JSON] = {"type": "tool_result", "tool_use_id": call.id, "content": content}
    if call.status is not CallStatus.COMPLETED:
        block["is_error"] = True
    return block


def fence_blocks(blocks: list[dict[str, JSON]], tool_name: str) -> list[dict[str, JSON]]:
    """A result's text blocks fenced as the tool's output; images and documents pass as they are."""
    return [
        text_block(tool_output(tool_name, str(b.get("text", "")))) if b.get("type") == "text" else b for b in blocks
    ]


def late_result_note(call: ToolCall, max_chars: int) -> str:
    """The labelled note that delivers a background call's result once, after a yield."""
    header = f"[background tool result] {call.tool_name} (tool_call_id {call.id}) finished: {call.status.value}"
    return f"{header}\n{tool_output(call.tool_name, truncate(call_outcome_text(call), max_chars))}"


def late_result_blocks(call: ToolCall, max_chars: int) -> list[dict[str, JSON]]:
    """The late note as blocks: the note's text, then any image the result holds, so the model still sees it."""
    images = [b for b in result_blocks(call.result) or [] if b.get("type") != "text"]
    return [text_block(late_result_note(call, max_chars)), *(images if call.status is CallStatus.COMPLETED else [])]


def text_block(text: str) -> dict[str, JSON]:
    return {"type": "text", "text": text}


def injection_blocks(notes: list[Content]) -> list[dict[str, JSON]]:
    """Each note labelled as mid-turn: its leading text gets the prefix, blocks of other kinds follow it."""
    blocks: list[dict[str, JSON]] = []
    for note in notes:
        if isinstance(note, str):
            blocks.append(text_block(f"{INJECTION_PREFIX} {note}"))
        elif note[0].get("type") == "text":
            blocks += [text_block(f"{INJECTION_PREFIX} {note[0]['text']}"), *note[1:]]
        else:
            blocks += [text_block(INJECTION_PREFIX), *note]
    return blocks


def append_user(messages: list[Message], blocks: list[dict[str, JSON]]) -> Message:
    """Add user content, merging into a trailing user message so roles keep alternating.

    Tool results stay in front of any text, as the API requires.
    """
    if messages and messages[-1]["role"] == "user":
        last = messages[-1]
        existing = _as_blocks(last["content"])
        results = [b for b in existing + blocks if b.get("type") == "tool_result"]
        others = [b for b in existing + blocks if b.get("type") != "tool_result"]
        last["content"] = results + others
        return last
    message: Message = {"role": "user", "content": list(blocks)}
    messages.append(message)
    return message


def _as_blocks(content: str | list[dict[str, JSON]]) -> list[dict[str, JSON]]:
    return [text_block(content)] if isinstance(content, str) else list(content)


def normalise_tool_uses(content: list[dict[str, JSON]]) -> list[str]:
    """Give every tool_use an id and an object input, so a malformed one can still be answered.

    Returns a problem description per block id for blocks that had to be fixed.
    """
    problems: list[str] = []
    for block in content:
        if block.get("type") != "tool_use":
            continue
        if not block.get("id"):
            block["id"] = f"toolu_missing_{uuid.uuid4().hex[:16]}"
            problems.append(block["id"])
        if not isinstance(block.get("input"), dict):
            block["input"] = {}
            problems.append(block["id"])
    return problems


def unanswered_tool_uses(messages: list[Message]) -> list[str]:
    """Ids of tool_use blocks in a trailing assistant message that never got results (a crash mid-turn)."""
    if not messages or messages[-1]["role"] != "assistant" or isinstance(messages[-1]["content"], str):
        return []
    return [block["id"] for block in messages[-1]["content"] if block.get("type") == "tool_use"]
