"""The earlier messages of a thread, for when the bot is first mentioned in the middle of one.

The model should know what the thread was about, but a thread can be long, so the
context is bounded: the root message, then the newest replies before the mention,
up to `MAX_MESSAGES` of them and `MAX_CHARS` characters, oldest first.

`conversations.replies` only pages forward, from the root, so the newest replies
are the last ones read: the reader walks the pages up to the mention, keeping only
the root and the newest `MAX_MESSAGES` replies in memory. The walk stops after
`MAX_PAGES` pages (a few thousand replies) so one mention costs a bounded number of
calls; past that the context says that later replies were not read.

Each quoted line names its author as a live message does (`said`: Slack id and display name), the names
looked up once per person through the same cached `users.info` as live messages.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.fence import history, said
from bot.errors import SlackResponseError, SlackUnreachable
from bot.slack.filters import strip_mention
from bot.text import clean_text
from bot.types import Speaker

log = logging.getLogger(__name__)

MAX_MESSAGES = 50
MAX_CHARS = 20_000
PAGE_SIZE = 200
"""Slack recommends no more than 200 items a page."""
MAX_PAGES = 10
HEADER = "[Earlier messages in this Slack thread, for context]"
FOOTER = "[The message addressed to you]"
UNREAD = "[… later replies not read: the thread is too long]"


SpeakerLookup = Callable[[str], Awaitable[Speaker]]
"""A Slack user id to the person as the model names them (id and display name)."""


def _line(message: dict[str, Any], bot_user_id: str, names: Mapping[str, str], max_chars: int | None = None) -> str:
    """One earlier message, attributed to its author in the form the model is told to trust."""
    user = str(message.get("user") or "")
    if user == bot_user_id:
        speaker = Speaker(user, "you (the bot)")
    elif message.get("bot_id") and not user:
        speaker = Speaker(str(message["bot_id"]), f"bot {message.get('username') or message['bot_id']}")
    else:
        speaker = Speaker(user or "unknown", names.get(user, ""))
    text = strip_mention(message["text"], bot_user_id)
    return said(speaker, text[:max_chars] if max_chars is not None else text, ts=str(message.get("ts") or "") or None)


def format_context(
    messages: list[dict[str, Any]],
    *,
    bot_user_id: str,
    before_ts: str,
    max_messages: int = MAX_MESSAGES,
    max_chars: int = MAX_CHARS,
    skipped: int = 0,
    unread: bool = False,
    admit: Callable[[dict[str, Any]], bool] | None = None,
    names: Mapping[str, str] | None = None,
) -> str | None:
    """One block of text quoting the thread before `before_ts`; None when there is nothing before it.

    `messages` is the root then replies, oldest first; `skipped` counts earlier replies the reader already
    left out, `unread` says it stopped before reaching `before_ts`. Messages `admit` refuses (people the bot
    does not answer) are left out, and one line says how many: what they wrote must not steer the model.
    `names` gives the display name of each user id quoted; one missing leaves that person's id alone.
    """
    names = names or {}
    said_before = [m for m in messages if _said_before(m, before_ts)]
    earlier = [m for m in said_before if admit is None or _ours(m, bot_user_id) or admit(m)]
    refused = len(said_before) - len(earlier)
    left_out = [f"[{refused} messages from people not allowed to talk to you were left out]"] if refused else []
    if not earlier:
        return clean_text("\n".join([HEADER, history(left_out)])) if refused else None
    root, replies = earlier[0], earlier[1:]
    lines: list[str] = []
    budget = max_chars
    for message in reversed(replies[-(max_messages - 1) :] if max_messages > 1 else []):
        line = _line(message, bot_user_id, names)
        if len(line) > budget:
            break
        lines.append(line)
        budget -= len(line) + 1
    skipped += len(replies) - len(lines)
    root_line = _line(root, bot_user_id, names, max(budget, 200))
    quoted = [root_line, *([f"[… {skipped} earlier replies not shown]"] if skipped else []), *reversed(lines)]
    return clean_text("\n".join([HEADER, history([*quoted, *left_out, *([UNREAD] if unread else [])])]))


async def thread_context(
    client: AsyncWebClient,
    *,
    channel: str,
    thread_ts: str,
    before_ts: str,
    bot_user_id: str,
    admit: Callable[[dict[str, Any]], bool] | None = None,
    speaker: SpeakerLookup | None = None,
) -> str | None:
    """Read the thread up to the mention (see the module doc) and format it, each author named through
    `speaker`; None when there is nothing."""
    root: dict[str, Any] | None = None
    newest: deque[dict[str, Any]] = deque(maxlen=MAX_MESSAGES - 1)
    read = pages = 0
    unread = False
    try:
        first = await client.conversations_replies(
            channel=channel, ts=thread_ts, latest=before_ts, inclusive=False, limit=PAGE_SIZE
        )
        async for page in first:  # slack_sdk follows `next_cursor` itself
            for message in page.get("messages") or []:
                if message.get("ts") == thread_ts:
                    root = root or message  # the parent heads every page
                elif _said_before(message, before_ts):
                    newest.append(message)
                    read += 1
            pages += 1
            if pages >= MAX_PAGES:
                unread = bool((page.get("response_metadata") or {}).get("next_cursor"))
                break
    except SlackResponseError as exc:
        log.warning("conversations.replies %s/%s failed: %s", channel, thread_ts, exc.error)
        unread = True  # whatever came after the pages already read
    except (SlackUnreachable, TimeoutError) as exc:  # the message is answered without (all of) its context
        log.warning("conversations.replies %s/%s did not answer: %r", channel, thread_ts, exc)
        unread = True
    if root is None:
        return None
    quoted = [root, *newest]
    return format_context(
        quoted,
        bot_user_id=bot_user_id,
        before_ts=before_ts,
        skipped=read - len(newest),
        unread=unread,
        admit=admit,
        names=await _names(_authors(quoted, bot_user_id, admit), speaker) if speaker is not None else None,
    )


def _authors(
    messages: list[dict[str, Any]], bot_user_id: str, admit: Callable[[dict[str, Any]], bool] | None
) -> list[str]:
    """The people (not the bot, not other apps, not those left out) whose messages may be quoted, each once."""
    users = (str(m.get("user") or "") for m in messages if admit is None or admit(m))
    return list(dict.fromkeys(user for user in users if user and user != bot_user_id))


async def _names(users: list[str], speaker: SpeakerLookup) -> dict[str, str]:
    """Display names of `users`, looked up together; a person Slack does not name keeps only their id."""
    found = await asyncio.gather(*(speaker(user) for user in users))
    return {person.id: person.name for person in found}


def _ours(message: dict[str, Any], bot_user_id: str) -> bool:
    """The bot's own posts are always quoted: the allow-lists are about people."""
    return message.get("user") == bot_user_id


def _said_before(message: dict[str, Any], before_ts: str) -> bool:
    """Words said before the mention (file-only and empty messages carry nothing to quote)."""
    return float(message.get("ts", 0)) < float(before_ts) and bool((message.get("text") or "").strip())


def with_context(context: str | None, text: str) -> str:
    return f"{context}\n\n{FOOTER}\n{text}" if context else text
