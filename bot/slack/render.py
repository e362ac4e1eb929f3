"""What the Slack edge shows, as pure functions: tool-call status lines, Block Kit, answer messages.

How a call is worded is `bot.calls.summary`'s, shared with the console; this module
only fits it to mrkdwn (mentions, escaping, code spans). Whatever the model, a tool or
a reminder wrote goes through `defuse`: `<!here>`, `<!channel>`, `@everyone`, a user
group or a user mention in it must not notify anyone. Nothing here does I/O or
keeps state, so every message the bot can post is built (and unit-tested) from a
value. Answers go out in Slack's `markdown` block, which renders the model's
Markdown itself: no home-made Markdown→mrkdwn regexes.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from bot.calls.summary import arguments_text, call_label, icon, state_text
from bot.slack.split import close_open_fence
from bot.toolcall import ToolCall
from bot.types import LineKind, OwedLine

Block = dict[str, Any]

# How what is built here reaches Slack: the edge passes these to the status board and the reply stream,
# which so never touch the client themselves.
Post = Callable[[str, list[Block], bool], Awaitable[tuple[str, str] | None]]
"""Posts (text, blocks, owed) in the session's thread; returns the new message's (channel, ts), else None.

`owed` marks a message's last word (an answer part that is complete, a final status): if it does not land now,
the outbox delivers it later, so None means "handed over". A message that is not owed yet and does not land is
left to its owner, who owes its last word once it has one."""
Edit = Callable[[str, str, str, list[Block], bool], None]
"""Asks for an edit of (channel, ts, text, blocks, final)."""

CANCEL_ACTION = "cancel_call"
APPROVE_ACTION = "approve_call"
DENY_ACTION = "deny_call"
ANSWER_ACTION = "answer_call"
"""A question's option buttons are `answer_call:<index>` (action ids are unique in a block); the value is the call."""
ANSWER_ACTIONS = re.compile(rf"^{ANSWER_ACTION}:\d+$")
BUTTON_TEXT_MAX_CHARS = 75
ARGUMENTS_MAX_CHARS = 2_900
"""What fits a section beside its code fence; longer arguments are shared as a file beside the status."""
MAX_CALL_BLOCKS = 49
"""A message holds 50 blocks; one is kept for the "and N more" line."""
SECTION_MAX_CHARS = 3_000

_USER_ID = re.compile(r"[UW][A-Z0-9]+")
_JOINER = "\u2060"
"""WORD JOINER: invisible, and enough to keep `@` and the word apart for Slack's mention parser."""
_ENCODED_MENTION = re.compile(
    r"<(?:!(?P<broadcast>channel|here|everyone)|!subteam\^(?P<group>[A-Za-z0-9]+)|@(?P<user>[UW][A-Z0-9]+))"
    r"(?:\|(?P<label>[^>]*))?>",
    re.IGNORECASE,
)
_BARE_BROADCAST = re.compile(r"@(?=(?:channel|here|everyone)\b)", re.IGNORECASE)


def escape(text: str) -> str:
    """Escape the three characters mrkdwn treats as markup (`&`, `<`, `>`)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def defuse(text: str) -> str:
    """Text from the model, a tool or a reminder, with every mention made inert: it still reads `@here`,
    `@channel`, `@team` or `@U123`, but notifies nobody. Only the bot's own mentions (`who`, `reminder_text`)
    may ping, and they are added after this."""

    def inert(match: re.Match[str]) -> str:
        label = (match["label"] or "").lstrip("@") or match["broadcast"] or match["group"] or match["user"]
        return f"@{_JOINER}{label}"

    return _BARE_BROADCAST.sub("@" + _JOINER, _ENCODED_MENTION.sub(inert, text))


def who(by: str | None) -> str:
    """A Slack user id as a mention, anything else ("model: reason", "shutdown") as escaped text."""
    if not by:
        return "someone"
    return f"<@{by}>" if _USER_ID.fullmatch(by) else escape(by)


def call_line(call: ToolCall, now: datetime | None = None) -> str:
    """One call as a line of mrkdwn: the shared wording, with mentions, escaping, and the label as code.

    A backtick inside the label would end the code span early, so it becomes a quote.
    """
    label = defuse(escape(call_label(call).replace("`", "'")))
    return f"{icon(call)} `{label}` — {state_text(call, now=now, who=who, text=lambda shown: defuse(escape(shown)))}"


def status_message(
    calls: list[ToolCall], now: datetime | None = None, *, revision: str = "0", preamble: str | None = None
) -> tuple[str, list[Block]]:
    """A tool batch's status message: fallback text, and a section per call with a Cancel button while open.

    `preamble` is what the model said before asking for the calls, shown above them (in a `markdown` block, as
    an answer is) so that a tool turn costs one post less. Each rendering that replaces an earlier one needs its
    own `revision`: Slack asks for new `block_id`s when a message is updated (a block kept under its old id may
    keep its old state in clients).
    """
    lines = [call_line(call, now) for call in calls]
    blocks: list[Block] = []
    said = ""
    if preamble:
        said, blocks = answer_message(preamble)
        said += "\n"
    for call, line in zip(calls[: MAX_CALL_BLOCKS - len(blocks)], lines, strict=False):
        block: Block = {
            "type": "section",
            "block_id": f"call:{call.id}:{revision}"[-255:],
            "text": {"type": "mrkdwn", "text": line[:SECTION_MAX_CHARS]},
        }
        if call.awaiting_answer:
            blocks += [block, *question_blocks(call, revision)]
            continue
        if call.awaiting_approval:
            blocks += [block, *approval_blocks(call, revision)]
            continue
        if not call.is_final:
            block["accessory"] = {
                "type": "button",
                "action_id": CANCEL_ACTION,
                "value": call.id,
                "style": "danger",
                "text": {"type": "plain_text", "text": "Cancel"},
            }
        blocks.append(block)
    if len(calls) > MAX_CALL_BLOCKS - bool(preamble):
        more = len(calls) - MAX_CALL_BLOCKS + bool(preamble)
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"…and {more} more calls"}]})
    return (said + "\n".join(lines))[:SECTION_MAX_CHARS], blocks


def approval_blocks(call: ToolCall, revision: str) -> list[Block]:
    """The arguments in full (or a pointer to the file that holds them) and the Approve / Deny buttons."""
    text = arguments_text(call)
    fence = "`" * 3
    safe = defuse(escape(text.replace(fence, "'" * 3)))  # a fence in the text would end the block early
    shown = (
        f"{fence}{safe}{fence}"
        if len(text) <= ARGUMENTS_MAX_CHARS
        else f"The arguments are {len(text):,} characters long: they are in the file `{arguments_file(call)}` here."
    )
    button = {"type": "button", "value": call.id}
    return [
        {"type": "section", "block_id": f"args:{call.id}:{revision}"[-255:], "text": {"type": "mrkdwn", "text": shown}},
        {
            "type": "actions",
            "block_id": f"decide:{call.id}:{revision}"[-255:],
            "elements": [
                {**button, "action_id": APPROVE_ACTION, "style": "primary", "text": _plain("Approve")},
                {**button, "action_id": DENY_ACTION, "style": "danger", "text": _plain("Deny")},
                {**button, "action_id": CANCEL_ACTION, "text": _plain("Cancel")},
            ],
        },
    ]


def question_blocks(call: ToolCall, revision: str) -> list[Block]:
    """A question for the person it names: its text, and a button per option (else how to answer), and Cancel.

    The requester is mentioned, so the question reaches them like a direct word; the text is the model's, so
    its own mentions are made inert. A button carries the call and the option's index, never its text: the
    answer is taken from the call's own options."""
    asked = f"{who(call.requester)}, " if call.requester else ""
    question = defuse(escape(str(call.input.get("question", ""))))[: SECTION_MAX_CHARS - 80]
    blocks: list[Block] = [
        {
            "type": "section",
            "block_id": f"question:{call.id}:{revision}"[-255:],
            "text": {"type": "mrkdwn", "text": f"❓ {asked}*a question for you:*\n{question}"},
        }
    ]
    options = call.options
    button = {"type": "button", "value": call.id}
    elements = [
        {**button, "action_id": f"{ANSWER_ACTION}:{index}", "text": _plain(option[:BUTTON_TEXT_MAX_CHARS])}
        for index, option in enumerate(options)
    ]
    if not options:
        hint = "Reply in this thread to answer: your next reply here is the answer."
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": hint}]})
    blocks.append(
        {
            "type": "actions",
            "block_id": f"answer:{call.id}:{revision}"[-255:],
            "elements": [*elements, {**button, "action_id": CANCEL_ACTION, "text": _plain("Cancel")}],
        }
    )
    return blocks


def arguments_file(call: ToolCall) -> str | None:
    """The name of the file that carries a call's arguments when they are too long to show; None when they fit."""
    return f"arguments-{call.id}.txt" if len(arguments_text(call)) > ARGUMENTS_MAX_CHARS else None


def _plain(text: str) -> dict[str, str]:
    return {"type": "plain_text", "text": text}


class EmptyMessage(ValueError):
    """A message with nothing to show: Slack refuses empty `text` and empty blocks, so it is never sent."""


def sendable(text: str, blocks: list[Block] | None) -> tuple[str, list[Block] | None]:
    """(text, blocks) as Slack accepts them: blank blocks left out, blank text replaced by the blocks' own.

    The last guard before a post or an edit, whatever built the message; raises `EmptyMessage` when nothing is left.
    """
    kept = [block for block in blocks or [] if not _blank(block)]
    if not text.strip():
        text = next((shown for block in kept if (shown := _block_text(block)).strip()), "")
    if not text.strip():
        raise EmptyMessage("a message with no text and no blocks")
    return text, (kept or None) if blocks is not None else None


def _block_text(block: Block) -> str:
    inner = block.get("text")
    if isinstance(inner, dict):
        inner = inner.get("text")
    return inner if isinstance(inner, str) else ""


def _blank(block: Block) -> bool:
    """A text-carrying block (markdown, section without fields, header) whose text is blank."""
    if block.get("type") not in {"markdown", "section", "header"} or block.get("fields"):
        return False
    return not _block_text(block).strip()


def outcomes_block(calls: list[ToolCall]) -> Block:
    """How an answer's calls ended, for an answer posted while their status message still shows them running."""
    lines = "\n".join(call_line(call) for call in calls)
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": lines[:SECTION_MAX_CHARS]}]}


def answer_message(chunk: str, *, streaming: bool = False) -> tuple[str, list[Block]]:
    """One message of the model's answer: the Markdown in a `markdown` block, and the raw text as fallback.

    While streaming, a code fence still open is closed for display, so half an answer renders cleanly.
    """
    shown = defuse(close_open_fence(chunk) if streaming else chunk)
    return shown, [{"type": "markdown", "text": shown}]


def reminder_text(text: str, requester: str | None) -> str:
    """The reminder's own words made inert; the one mention that pings is the person who asked for it."""
    return f"<@{requester}> ⏰ {defuse(text)}" if requester else f"⏰ {defuse(text)}"


def render_line(line: OwedLine, asker: str | None) -> str:
    """A line the engine owes a thread, as Slack shows it: a reminder mentions whoever asked for it (else who
    asks there now); a notice may quote the model or a tool, so its mentions are made inert."""
    if line.kind is LineKind.REMINDER:
        return reminder_text(line.text, line.requester or asker)
    return defuse(line.text)
