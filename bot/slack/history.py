"""The earlier messages of a thread, for when the bot is first mentioned in the middle of one.

The model should know what the thread was about, but a thread can be long, so the
context is bounded: the root message, then the newest replies before the mention,
up to `MAX_MESSAGES` of them and `MAX_CHARS` characters, oldest first.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.filters import strip_mention

log = logging.getLogger(__name__)

MAX_MESSAGES = 50
MAX_CHARS = 20_000
PAGE_SIZE = 200
MAX_PAGES = 5
HEADER = "[Earlier messages in this Slack thread, for context]"
FOOTER = "[The message addressed to you]"


def _speaker(message: dict[str, Any], bot_user_id: str) -> str:
    if message.get("user") == bot_user_id:
        return "you (the bot)"
    if message.get("bot_id") and not message.get("user"):
        return f"bot {message.get('username') or message['bot_id']}"
    return f"<@{message.get('user', 'unknown')}>"


def format_context(
    messages: list[dict[str, Any]],
    *,
    bot_user_id: str,
    before_ts: str,
    max_messages: int = MAX_MESSAGES,
    max_chars: int = MAX_CHARS,
) -> str | None:
    """One block of text quoting the thread before `before_ts`; None when there is nothing before it."""
    earlier = [m for m in messages if float(m.get("ts", 0)) < float(before_ts) and (m.get("text") or "").strip()]
    if not earlier:
        return None
    root, replies = earlier[0], earlier[1:]
    lines: list[str] = []
    budget = max_chars
    for message in reversed(replies[-(max_messages - 1) :] if max_messages > 1 else []):
        line = f"{_speaker(message, bot_user_id)}: {strip_mention(message['text'], bot_user_id)}"
        if len(line) > budget:
            break
        lines.append(line)
        budget -= len(line) + 1
    skipped = len(replies) - len(lines)
    root_line = f"{_speaker(root, bot_user_id)}: {strip_mention(root['text'], bot_user_id)}"[: max(budget, 200)]
    quoted = [root_line, *([f"[… {skipped} earlier replies not shown]"] if skipped else []), *reversed(lines)]
    return "\n".join([HEADER, *quoted])


async def thread_context(
    client: AsyncWebClient, *, channel: str, thread_ts: str, before_ts: str, bot_user_id: str
) -> str | None:
    """Fetch the thread up to the mention (pages come oldest first, so read a few) and format it."""
    messages: list[dict[str, Any]] = []
    cursor: str | None = None
    try:
        for _ in range(MAX_PAGES):
            response = await client.conversations_replies(
                channel=channel, ts=thread_ts, latest=before_ts, inclusive=False, limit=PAGE_SIZE, cursor=cursor
            )
            page = list(response.get("messages") or [])
            messages += page if not messages else [m for m in page if m.get("ts") != thread_ts]
            cursor = (response.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
    except SlackApiError as exc:
        log.warning("conversations.replies %s/%s failed: %s", channel, thread_ts, exc.response.get("error"))
        if not messages:
            return None
    return format_context(messages, bot_user_id=bot_user_id, before_ts=before_ts)


def with_context(context: str | None, text: str) -> str:
    return f"{context}\n\n{FOOTER}\n{text}" if context else text
