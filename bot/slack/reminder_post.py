"""A reminder posted in its thread once, whatever Slack or a crash did to the attempts before.

Every reminder post carries Slack message metadata (`event_type`
`threadbot_reminder`, the run's reminder id and due time as its payload). A post
marked `recheck` (a retry, or one a restart found owed) first reads the thread with
`include_all_metadata` and counts as posted if a message with that mark is there:
a 500 that Slack answered after it stored the message, or a kill between the post
and its confirmation in the store, never makes it twice. The read walks the thread
from its root, at most `MAX_PAGES` pages, so a thread longer than that is posted
in without the check, as is a session that has no thread yet (a heartbeat's first post).
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import SlackResponseError, SlackUnreachable
from bot.slack.posts import PostFailed, PostQueue, PostRejected, thread_holds
from bot.types import ReminderOutcome, ReminderPost

log = logging.getLogger(__name__)

EVENT_TYPE = "threadbot_reminder"
MAX_PAGES = 10
# Errors no retry can fix: the post is given up rather than retried until the deadline.
PERMANENT_ERRORS = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "invalid_auth",
        "account_inactive",
        "token_revoked",
        "missing_scope",
        "restricted_action",
        "msg_too_long",
    }
)


def mark(post: ReminderPost) -> dict[str, Any]:
    """The metadata that names this run of this reminder."""
    return {"event_type": EVENT_TYPE, "event_payload": _payload(post)}


def _payload(post: ReminderPost) -> dict[str, Any]:
    return {"reminder_id": post.reminder_id, "due_at": post.due_at.isoformat()}


async def already_posted(client: AsyncWebClient, *, channel: str, thread_ts: str, post: ReminderPost) -> bool:
    """Whether the thread holds a message marked as this run (a `SlackError` if it cannot be read)."""
    return await thread_holds(client, channel=channel, thread_ts=thread_ts, mark=mark(post), max_pages=MAX_PAGES)


async def post_reminder(
    client: AsyncWebClient,
    posts: PostQueue,
    *,
    channel: str,
    thread_ts: str | None,
    text: str,
    post: ReminderPost,
) -> tuple[ReminderOutcome, str | None]:
    """Post through the channel's post budget (after the check, for a `recheck`) ; the outcome, and the new
    message's ts when one was posted. `client` reads the thread."""
    try:
        if (
            post.recheck
            and thread_ts is not None
            and await already_posted(client, channel=channel, thread_ts=thread_ts, post=post)
        ):
            log.info("reminder %d was already in %s/%s; not posting it again", post.reminder_id, channel, thread_ts)
            return ReminderOutcome.POSTED, None
        ts = await posts.post(channel=channel, thread_ts=thread_ts, text=text, metadata=mark(post))
    except PostRejected as exc:
        error = str(exc)
        log.warning("reminder %d in %s not posted: %s", post.reminder_id, channel, error)
        return (ReminderOutcome.UNDELIVERABLE if error in PERMANENT_ERRORS else ReminderOutcome.RETRY), None
    except SlackResponseError as exc:  # the thread could not be read
        log.warning("reminder %d in %s not checked: %s", post.reminder_id, channel, exc.error)
        return ReminderOutcome.RETRY, None
    except (PostFailed, SlackUnreachable, TimeoutError) as exc:  # still failing after the retries
        log.warning("reminder %d in %s not posted: %r", post.reminder_id, channel, exc)
        return ReminderOutcome.RETRY, None
    return ReminderOutcome.POSTED, ts
