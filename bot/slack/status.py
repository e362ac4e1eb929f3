"""Status messages: one Slack message per tool batch, kept in step with its calls until all are final.

The message is posted as a queued operation of its session and then only edited,
through the `EditScheduler`, as progress and endings arrive; a call that outlives
its turn keeps updating the same message. The board also answers "which calls does
this message show?", which is what a cancel reaction on it needs.

A status message whose post did not land is not given up: it waits (`deferred`)
until its calls are final, and then its final state is posted as an owed post,
which the outbox delivers however long Slack takes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from bot.slack.render import Block, Edit, Post, status_message
from bot.toolcall import ToolCall

REMEMBER_MESSAGES = 2_000
"""Finished status messages remembered for lookups (a late reaction on them is answered, not guessed)."""


@dataclass(slots=True)
class StatusMessage:
    session_key: str
    calls: list[ToolCall]
    channel: str | None = None
    ts: str | None = None
    shown: str | None = None
    final: bool = False
    failed: bool = False
    posting: bool = True  # until the post returns, changes are left to the post itself
    deferred: bool = False  # its post did not land: its final state will be posted instead
    revision: int = 0  # how many times it was rendered: each rendering gets new block ids
    preamble: str | None = None  # what the model said before it asked for these calls, shown above them

    def render(self) -> tuple[str, list[Block]]:
        self.revision += 1
        return status_message(self.calls, revision=str(self.revision), preamble=self.preamble)

    @property
    def open_calls(self) -> list[ToolCall]:
        return [call for call in self.calls if not call.is_final]


class StatusBoard:
    def __init__(self, edit: Edit, repost: Callable[[StatusMessage], None]) -> None:
        """`repost` queues `post()` again for a deferred message whose calls are now all final."""
        self._edit = edit
        self._repost = repost
        self._by_call: dict[str, StatusMessage] = {}
        self._by_ts: OrderedDict[tuple[str, str], StatusMessage] = OrderedDict()
        self._of_session: dict[str, list[StatusMessage]] = {}  # until its final state is known to be shown

    def start(self, session_key: str, calls: list[ToolCall], preamble: str | None = None) -> StatusMessage:
        """Track a new batch; the caller queues `post(message, ...)` behind the session's other posts."""
        message = StatusMessage(session_key, list(calls), preamble=preamble)
        for call in calls:
            self._by_call[call.id] = message
        self._of_session.setdefault(session_key, []).append(message)
        return message

    async def post(self, message: StatusMessage, poster: Post) -> None:
        """Post the batch as it is now (calls may have moved on since they started), then catch up."""
        text, blocks = message.render()
        message.final = all(call.is_final for call in message.calls)
        try:
            where = await poster(text, blocks, message.final)
        finally:
            message.posting = False
        if where is None:
            if message.final:  # owed: the outbox delivers it
                self._forget(message)
            else:
                message.deferred = True
                self._repost_if_final(message)  # its calls may have ended while it was being tried
            return
        message.shown = text
        self._place(message, *where)
        if message.final:
            self._forget(message)
        else:
            self.refresh(message)

    def adopt(self, message: StatusMessage, channel: str, ts: str) -> None:
        """Show the batch on a message already in its thread (the model's words before the calls, posted before the
        edge heard of them), edited into the status message instead of a post of its own."""
        message.posting = False
        self._place(message, channel, ts)
        self.refresh(message)

    def _place(self, message: StatusMessage, channel: str, ts: str) -> None:
        """The message is at (channel, ts) in Slack: found there by reactions and cancels from now on."""
        message.channel, message.ts = channel, ts
        self._by_ts[(channel, ts)] = message
        self._trim()

    def changed(self, call: ToolCall) -> bool:
        """A call moved on: re-render the message that shows it (the scheduler keeps only the newest state).

        False when no message of this process shows the call."""
        message = self._by_call.get(call.id)
        if message is None:
            return False
        if message.posting:
            return True
        if message.deferred:
            self._repost_if_final(message)
        else:
            self.refresh(message)
        return True

    def _repost_if_final(self, message: StatusMessage) -> None:
        if all(call.is_final for call in message.calls):
            message.deferred, message.posting = False, True
            self._repost(message)

    def refresh(self, message: StatusMessage) -> None:
        if message.ts is None or message.channel is None or message.failed:
            return
        final = all(call.is_final for call in message.calls)
        text, blocks = status_message(message.calls, revision=str(message.revision + 1), preamble=message.preamble)
        if text == message.shown and final == message.final:
            return
        message.revision += 1
        message.shown, message.final = text, final
        self._edit(message.channel, message.ts, text, blocks, final)
        if final:
            self._forget(message)

    def awaiting_final(self, session_key: str, owes_final: Callable[[str, str], bool]) -> list[ToolCall]:
        """The session's calls whose final state is not on Slack yet (queued edits, posts not landed).

        Only the session's own messages are looked at (an answer asks this, and scanning every thread's
        messages made each answer cost more the busier the workspace); one whose final state is shown, or
        given up, can never be awaited again and is dropped from the session's list."""
        calls: list[ToolCall] = []
        still: list[StatusMessage] = []
        for message in self._of_session.pop(session_key, []):
            if message.failed:
                continue
            if not all(call.is_final for call in message.calls):
                still.append(message)
                continue
            shown = message.channel is not None and message.ts is not None
            if (message.deferred or message.posting) or (shown and owes_final(message.channel or "", message.ts or "")):
                calls.extend(message.calls)
                still.append(message)
        if still:
            self._of_session[session_key] = still
        return calls

    def showing(self, call_id: str) -> StatusMessage | None:
        """The message of this process that shows the call, while it is not final."""
        return self._by_call.get(call_id)

    def find(self, channel: str, ts: str) -> StatusMessage | None:
        """The status message posted at (channel, ts), if this process posted it."""
        return self._by_ts.get((channel, ts))

    def abandon(self, session_key: str) -> None:
        """Forget the session's messages that were never posted (a quiet turn that turned out to say nothing),
        so their calls' later changes are not tracked for ever."""
        unposted = {id(m): m for m in self._by_call.values() if m.session_key == session_key and m.posting}
        for message in unposted.values():
            message.posting, message.failed = False, True
            self._forget(message)
        if session_key in self._of_session:
            self._of_session[session_key] = [m for m in self._of_session[session_key] if not m.failed]

    def open_messages(self) -> int:
        return len({id(message) for message in self._by_call.values()})

    def _forget(self, message: StatusMessage) -> None:
        for call in message.calls:
            if self._by_call.get(call.id) is message:
                del self._by_call[call.id]

    def _trim(self) -> None:
        while len(self._by_ts) > REMEMBER_MESSAGES:
            self._by_ts.popitem(last=False)
