"""Which Slack events are people talking to the bot, as pure functions over the event payload.

Kept apart from the dispatching so the rules (no loops with other bots, edits and
joins are not messages, a mention seen through a plain `message` event still counts)
can be tested from dicts alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bot.slack.admission import team_of
from bot.text import clean_text

# Subtypes that are a person saying something; every other subtype (message_changed, message_deleted,
# channel_join, bot_message, …) is bookkeeping the bot must not answer.
SPOKEN_SUBTYPES = frozenset({None, "file_share", "thread_broadcast", "me_message"})
STOP_WORDS = frozenset({"stop", "cancel"})
SESSION_PREFIX = "slack:"


def session_key(team: str, channel: str, thread_ts: str) -> str:
    """A session is one Slack thread: team, channel and the ts of the thread's root message."""
    return f"{SESSION_PREFIX}{team}:{channel}:{thread_ts}"


@dataclass(frozen=True, slots=True)
class Incoming:
    """A message a person wrote, in the shape the edge needs to route it."""

    team: str
    channel: str
    user: str
    user_team: str  # the author's own team: in a Slack Connect channel, not always the bot's
    text: str
    ts: str
    thread_ts: str  # the thread root: the message's own ts for a top-level message
    mentioned: bool
    direct: bool  # a 1:1 DM with the bot: every message is for it
    files: tuple[dict[str, Any], ...] = ()  # Slack's file objects, as the event carries them

    @property
    def key(self) -> str:
        return session_key(self.team, self.channel, self.thread_ts)

    @property
    def in_thread(self) -> bool:
        """True for a reply inside an existing thread (not the message that would start one)."""
        return self.thread_ts != self.ts

    @property
    def is_forget(self) -> bool:
        return self.text.strip().strip(".!").lower() == "forget"

    @property
    def is_stop(self) -> bool:
        return self.text.strip().strip(".!").lower() in STOP_WORDS


def strip_mention(text: str, bot_user_id: str) -> str:
    """The text without the bot's own `<@UBOT>` / `<@UBOT|name>` mentions."""
    return re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text).strip()


TWINNED_CHANNEL_TYPES = ("channel", "group")
"""Where Slack sends a mention twice, as `app_mention` and as `message`."""


def classify(body: dict[str, Any], bot_user_id: str) -> Incoming | None:
    """The message a `message` / `app_mention` event carries, or None when the bot must ignore it."""
    event = body.get("event") or {}
    kind = event.get("type")
    if kind not in ("message", "app_mention"):
        return None
    if event.get("subtype") not in SPOKEN_SUBTYPES or event.get("hidden"):
        return None
    user = event.get("user")
    if not user or user == bot_user_id or event.get("bot_id") or event.get("bot_profile"):
        return None  # our own posts and other bots': answering them is how loops start
    channel, ts = event.get("channel"), event.get("ts")
    if not channel or not ts:
        return None
    text = clean_text(str(event.get("text") or ""))  # a `\ud800` escape in the JSON must not reach the model
    mentioned = kind == "app_mention" or f"<@{bot_user_id}" in text
    channel_type = event.get("channel_type") or ("im" if str(channel).startswith("D") else "channel")
    if kind == "message" and mentioned and channel_type in TWINNED_CHANNEL_TYPES:
        return None  # its `app_mention` twin carries it: dropped here, before it costs a store round trip
    return Incoming(
        team=str(body.get("team_id") or event.get("team") or ""),
        channel=str(channel),
        user=str(user),
        user_team=team_of(event),
        text=strip_mention(text, bot_user_id),
        ts=str(ts),
        thread_ts=str(event.get("thread_ts") or ts),
        mentioned=mentioned,
        direct=channel_type == "im",
        files=tuple(item for item in event.get("files") or () if isinstance(item, dict)),
    )


def deleted_message(body: dict[str, Any]) -> tuple[str, str] | None:
    """(session key, ts of the deleted message) of a `message_deleted` event, or None for any other event.

    The ts is what finds the message again: it is stored in its attributed form, escaped, not as typed."""
    event = body.get("event") or {}
    if event.get("type") != "message" or event.get("subtype") != "message_deleted":
        return None
    previous = event.get("previous_message") or {}
    channel, ts = event.get("channel"), previous.get("ts") or event.get("deleted_ts")
    if not channel or not ts:
        return None
    team = str(body.get("team_id") or event.get("team") or "")
    return session_key(team, str(channel), str(previous.get("thread_ts") or ts)), str(ts)


def addressed(incoming: Incoming, *, in_session: bool, mention_only_channels: tuple[str, ...]) -> bool:
    """Whether this message is for the bot: a mention or a DM always is; a plain reply in one of its threads is,
    unless the channel is mention-only (`BOT_MENTION_ONLY_CHANNELS`, `*` for all), where people in a busy
    thread talk to each other without the bot answering every line."""
    if incoming.mentioned or incoming.direct:
        return True
    if not in_session:
        return False
    return not ("*" in mention_only_channels or incoming.channel in mention_only_channels)


def may_cancel(user: str, *, requesters: set[str], allowed_users: tuple[str, ...]) -> bool:
    """Only whoever asked (the session's or the turn's requester) or an explicitly allowed user may cancel."""
    return user in requesters or user in allowed_users
