"""A turn in Slack's agent surface, as pure functions: each tool call a task card, the turn one message.

Slack draws a call as a task (`task_update` chunk while the message streams, `task_card` block when the
message is written whole with `chat.update`); both are built here from slack_sdk's own models, so a
streamed card and its rewritten twin say the same. A task has four states (`pending`, `in_progress`,
`complete`, `error`); a call has more, so a cancelled, timed-out or orphaned call is an `error` whose
details say which ("cancelled by …", "timed out after 30.0s", "orphaned …"), and a call waiting for a
person's approval or answer is `pending` with who it waits for. The details are the call's state line
(`running 12s · slept 12s of 30s`), the one every edge shows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from slack_sdk.models.blocks import MarkdownBlock, RichTextBlock, RichTextSectionElement, TaskCardBlock
from slack_sdk.models.blocks.block_elements import RichTextElementParts
from slack_sdk.models.messages.chunk import TaskUpdateChunk

from bot.calls.summary import call_label, one_line, state_text
from bot.slack.render import defuse
from bot.toolcall import CallStatus, ToolCall

Block = dict[str, Any]

TITLE_MAX_CHARS = 200
DETAILS_MAX_CHARS = 400
TEXT_MAX_CHARS = 11_500
"""What of a turn's text one message shows: a `markdown` block (and `markdown_text`) holds 12,000 characters."""
MAX_CARDS = 49
"""A message holds 50 blocks; one is the text."""
CUT = "\n\n…"


def task_status(call: ToolCall) -> str:
    if call.status is CallStatus.PENDING:
        return "pending"
    if call.status is CallStatus.RUNNING:
        return "in_progress"
    return "complete" if call.status is CallStatus.COMPLETED else "error"


def task_title(call: ToolCall) -> str:
    return defuse(one_line(call_label(call), TITLE_MAX_CHARS))


def task_details(call: ToolCall, now: datetime | None = None) -> str:
    """The call's state in words; a person's id reads as `@U123` (a card's text is plain, nothing in it pings)."""
    line = state_text(call, now=now, who=lambda user: f"@{user}", text=defuse)
    return one_line(line, DETAILS_MAX_CHARS)


def task_chunk(call: ToolCall, now: datetime | None = None) -> TaskUpdateChunk:
    """The call's card as a stream shows it."""
    return TaskUpdateChunk(
        id=call.id, title=task_title(call), status=task_status(call), details=task_details(call, now)
    )


def task_block(call: ToolCall, now: datetime | None = None, *, revision: str = "0") -> Block:
    """The call's card as a block, for a message written whole (`chat.update`)."""
    details = RichTextBlock(
        elements=[RichTextSectionElement(elements=[RichTextElementParts.Text(text=task_details(call, now))])]
    )
    block = TaskCardBlock(
        task_id=call.id,
        title=task_title(call),
        status=task_status(call),
        details=details,
        block_id=f"task:{call.id}:{revision}"[-255:],
    )
    return block.to_dict()


def shown_text(text: str) -> str:
    """A turn's text as one message holds it (a longer answer is cut, and said to be)."""
    return text if len(text) <= TEXT_MAX_CHARS else text[: TEXT_MAX_CHARS - len(CUT)] + CUT


def turn_message(
    text: str, calls: list[ToolCall], now: datetime | None = None, *, revision: str = "0"
) -> tuple[str, list[Block]]:
    """The whole turn as one message: its text, then a card per call in the order the model asked for them."""
    blocks: list[Block] = []
    shown = defuse(shown_text(text)).strip()
    if shown:
        blocks.append(MarkdownBlock(text=shown, block_id=f"text:{revision}").to_dict())
    blocks += [task_block(call, now, revision=revision) for call in calls[:MAX_CARDS]]
    fallback = shown or "; ".join(f"{task_title(call)}: {task_details(call, now)}" for call in calls)
    return fallback[:3_000] or "…", blocks
