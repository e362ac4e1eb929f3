"""Files into a Slack thread with slack_sdk's `files_upload_v2`: what a tool shares, and answers too long to read.

An answer longer than `BOT_UPLOAD_OVER_CHARS` would be a wall of messages; it is
uploaded whole as `answer.md` with a short preview in the message instead. An
upload that fails (no `files:write` scope, Slack down) is reported back, so the
caller can fall back to plain messages and nothing is lost.
"""

from __future__ import annotations

import logging

from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import SlackError
from bot.slack.render import defuse

log = logging.getLogger(__name__)

UPLOAD_OVER_CHARS = 12_000
PREVIEW_CHARS = 700
ANSWER_FILE = "answer.md"


async def upload(
    client: AsyncWebClient,
    *,
    channel: str,
    thread_ts: str | None,
    filename: str,
    content: bytes | str,
    comment: str,
) -> str | None:
    """Upload and share in the thread; None on success, else what went wrong, in a few words."""
    try:
        await client.files_upload_v2(
            channel=channel,
            thread_ts=thread_ts,
            filename=filename,
            title=filename,
            content=content,
            initial_comment=comment,
        )
    except SlackError as exc:  # still failing after the client's retries
        error = exc.reason
    except TimeoutError as exc:
        error = type(exc).__name__
    else:
        return None
    log.warning("uploading %s to %s failed: %s", filename, channel, error)
    return error


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """The start of `text`, cut at a paragraph or line break when one is near, never inside a code fence."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    for breaker in ("\n\n", "\n"):
        at = cut.rfind(breaker)
        if at >= limit // 2:
            cut = cut[:at]
            break
    if cut.count("```") % 2:
        cut = cut[: cut.rfind("```")]
    return cut.rstrip() + " …"


def answer_comment(text: str, *, continued: bool) -> str:
    """The message beside an uploaded answer: a preview, or (when its start is already shown) a pointer."""
    size = f"{len(text):,} characters"
    if continued:
        return f"📎 The answer goes on; the whole of it ({size}) is in the attached file."
    return f"{defuse(preview(text))}\n\n📎 The whole answer ({size}) is in the attached file."
