"""The streaming part of the fake Slack: ``chat.startStream`` / ``chat.appendStream`` / ``chat.stopStream``.

Kept apart from ``slack_api.py`` like ``slack_agent.py``; ``FakeSlack`` builds one ``FakeStreams`` and lets it add
its methods. What it copies from Slack's docs and its SDK:

- A stream is a bot message in a thread (``thread_ts`` is required: "streamed messages should always be replies"),
  in state ``streaming`` from ``chat.startStream`` until ``chat.stopStream`` or Slack's own end, then ``stopped``.
  ``chat.appendStream`` and ``chat.stopStream`` on a message that is not streaming answer
  ``message_not_in_streaming_state``; on a message that does not exist, ``message_not_found``.
- Slack ends a stream about 5 minutes after it starts (``limit_s``, seconds here so tests can outlive it) and, some
  report, after a pause without appends (``idle_s``, None: never); ``expire_before(method)`` ends the next stream
  that ``method`` is called on just before it answers, so both failure points can be tested without waiting.
- Outside a DM (a channel id not starting with ``D``) ``recipient_team_id`` and ``recipient_user_id`` are required:
  ``missing_recipient_team_id`` / ``missing_recipient_user_id``.
- ``markdown_text`` holds at most 12,000 characters (``msg_too_long``). ``chunks`` must each parse as one of
  slack_sdk's chunk models (``markdown_text``, ``task_update``, ``plan_update``, ``blocks``) with a ``task_update``
  status Slack knows (``pending``, ``in_progress``, ``complete``, ``error``), else ``invalid_chunks``.
- A ``task_update`` with an id already shown replaces that task's title, status, details and output; a new id adds
  a task after the others. The message shows its text as a ``markdown`` block and its tasks as ``task_card``
  blocks (what ``chat.update`` can write too), so a test reads what a person sees from ``message.blocks``.
- ``refusal``: the error an app that may not stream gets from ``chat.startStream`` (``not_authorized``); None
  accepts.
- Tiers (``limit_like_slack``): ``chat.appendStream`` Tier 4 (100+ a minute), ``chat.startStream`` and
  ``chat.stopStream`` Tier 2 (20+ a minute), per workspace.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slack_sdk.models.messages.chunk import Chunk, TaskUpdateChunk

if TYPE_CHECKING:
    from fakes.slack_api import FakeSlack, StoredMessage

JsonDict = dict[str, Any]
STREAM_LIMIT_S = 300.0
MAX_MARKDOWN = 12_000
TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})
TIERS_PER_MINUTE = {"chat.appendStream": 100, "chat.startStream": 20, "chat.stopStream": 20}


@dataclass
class Stream:
    """One streamed message as Slack keeps it."""

    channel: str
    ts: str
    recipient: tuple[str, str] | None
    started: float
    appended: float
    text: str = ""
    tasks: dict[str, JsonDict] = field(default_factory=dict)
    footer: list[JsonDict] = field(default_factory=list)
    state: str = "streaming"  # then "stopped"
    ended_by: str | None = None  # "stop", "limit", "idle", "expired"
    appends: int = 0


class FakeStreams:
    def __init__(self, slack: FakeSlack) -> None:
        self._slack = slack
        self.limit_s = STREAM_LIMIT_S
        self.idle_s: float | None = None
        self.refusal: str | None = None
        self.streams: dict[tuple[str, str], Stream] = {}
        self._expire_before: dict[str, int] = {}

    def handlers(self) -> dict[str, Callable[[JsonDict, str | None], JsonDict]]:
        return {
            "chat.startStream": self._start,
            "chat.appendStream": self._append,
            "chat.stopStream": self._stop,
        }

    def limit_like_slack(self, *, time_scale: float = 1.0) -> None:
        for method, per_minute in TIERS_PER_MINUTE.items():
            self._slack.rate_limit(method, per_minute=per_minute, time_scale=time_scale)

    def expire_before(self, method: str, times: int = 1) -> None:
        """The next ``times`` calls of ``chat.appendStream`` or ``chat.stopStream`` find their stream ended."""
        self._expire_before[method] = self._expire_before.get(method, 0) + times

    def of(self, channel: str, ts: str) -> Stream | None:
        return self.streams.get((channel, ts))

    # ---- methods ----------------------------------------------------------------------------------------------

    def _start(self, params: JsonDict, token: str | None) -> JsonDict:
        from fakes.slack_api import BOT_ID, BOT_USER_ID, SlackError, StoredMessage, _require

        if self.refusal is not None:
            raise SlackError(self.refusal)
        channel = _require(params, "channel", "channel_not_found")
        thread_ts = _require(params, "thread_ts", "invalid_thread_ts")
        team, user = params.get("recipient_team_id"), params.get("recipient_user_id")
        if not channel.startswith("D"):
            if not team:
                raise SlackError("missing_recipient_team_id")
            if not user:
                raise SlackError("missing_recipient_user_id")
        if self._slack.channels.get(channel, {}).get("is_member") is False:
            raise SlackError("not_in_channel")
        text, tasks = self._read(params)
        now = time.monotonic()
        ts = self._slack._next_ts()
        stream = Stream(channel, ts, (str(team), str(user)) if team and user else None, now, now)
        self.streams[(channel, ts)] = stream
        self._apply(stream, text, tasks)
        message = StoredMessage(
            channel=channel, ts=ts, text=stream.text, user=BOT_USER_ID, thread_ts=thread_ts, bot_id=BOT_ID
        )
        message.blocks = self._blocks(stream)
        self._slack._store(message)
        return {"channel": channel, "ts": ts}

    def _append(self, params: JsonDict, token: str | None) -> JsonDict:
        stream, message = self._streaming(params, "chat.appendStream")
        text, tasks = self._read(params)
        if not text and not tasks:
            from fakes.slack_api import SlackError

            raise SlackError("no_text")
        self._apply(stream, text, tasks)
        stream.appended = time.monotonic()
        stream.appends += 1
        self._show(stream, message)
        return {"channel": stream.channel, "ts": stream.ts}

    def _stop(self, params: JsonDict, token: str | None) -> JsonDict:
        from fakes.slack_api import _check_blocks

        stream, message = self._streaming(params, "chat.stopStream")
        text, tasks = self._read(params)
        blocks = params.get("blocks")
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        _check_blocks(blocks)
        self._apply(stream, text, tasks)
        stream.footer = list(blocks or [])
        stream.state, stream.ended_by = "stopped", "stop"
        self._show(stream, message)
        return {"channel": stream.channel, "ts": stream.ts, "message": message.to_api()}

    # ---- the state machine ------------------------------------------------------------------------------------

    def _streaming(self, params: JsonDict, method: str) -> tuple[Stream, StoredMessage]:
        from fakes.slack_api import SlackError

        message = self._slack._find(params)
        stream = self.streams.get((message.channel, message.ts))
        if stream is None:
            raise SlackError("message_not_in_streaming_state")
        self._age(stream)
        if stream.state == "streaming" and self._expire_before.get(method, 0) > 0:
            self._expire_before[method] -= 1
            stream.state, stream.ended_by = "stopped", "expired"
        if stream.state != "streaming":
            raise SlackError("message_not_in_streaming_state")
        return stream, message

    def _age(self, stream: Stream) -> None:
        """Slack's own end of a stream: its time limit, or a pause without appends."""
        if stream.state != "streaming":
            return
        now = time.monotonic()
        if now - stream.started >= self.limit_s:
            stream.state, stream.ended_by = "stopped", "limit"
        elif self.idle_s is not None and now - stream.appended >= self.idle_s:
            stream.state, stream.ended_by = "stopped", "idle"

    def _read(self, params: JsonDict) -> tuple[str, list[JsonDict]]:
        """The text and task updates of a call, validated as Slack does (with slack_sdk's chunk models)."""
        from fakes.slack_api import SlackError

        text = str(params.get("markdown_text") or "")
        raw = params.get("chunks") or []
        if isinstance(raw, str):
            raw = json.loads(raw)
        if not isinstance(raw, list):
            raise SlackError("invalid_chunks")
        tasks: list[JsonDict] = []
        for item in raw:
            chunk = Chunk.parse(item) if isinstance(item, dict) else None
            if chunk is None:
                raise SlackError("invalid_chunks")
            if isinstance(chunk, TaskUpdateChunk):
                if not chunk.id or not chunk.title or chunk.status not in TASK_STATUSES:
                    raise SlackError("invalid_chunks")
                tasks.append(chunk.to_dict())
            elif chunk.type == "markdown_text":
                text += str(item.get("text") or "")
        if len(text) > MAX_MARKDOWN:
            raise SlackError("msg_too_long")
        return text, tasks

    @staticmethod
    def _apply(stream: Stream, text: str, tasks: list[JsonDict]) -> None:
        stream.text += text
        for task in tasks:
            stream.tasks[task["id"]] = {**stream.tasks.get(task["id"], {}), **task}

    def _show(self, stream: Stream, message: StoredMessage) -> None:
        self._slack._revise(message, stream.text, self._blocks(stream))
        self._slack._notify()

    @staticmethod
    def _blocks(stream: Stream) -> list[JsonDict]:
        blocks: list[JsonDict] = [{"type": "markdown", "text": stream.text}] if stream.text else []
        for task in stream.tasks.values():
            card = {"type": "task_card", "task_id": task["id"], "title": task["title"], "status": task["status"]}
            for part in ("details", "output"):
                if task.get(part):
                    card[part] = _rich_text(str(task[part]))
            blocks.append(card)
        return blocks + stream.footer


def _rich_text(text: str) -> JsonDict:
    return {
        "type": "rich_text",
        "elements": [{"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}],
    }


def task_cards(blocks: list[JsonDict] | None) -> list[tuple[str, str, str]]:
    """(task_id, status, details as text) of each task card a message shows, in order."""
    cards = []
    for block in blocks or []:
        if block.get("type") == "task_card":
            details = "".join(
                element.get("text", "")
                for section in (block.get("details") or {}).get("elements", [])
                for element in section.get("elements", [])
            )
            cards.append((block["task_id"], block.get("status", ""), details))
    return cards
