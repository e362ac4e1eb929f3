"""One streamed answer: posted on its first words, edited in place, split when it outgrows a message.

The answer is a list of Slack messages ("parts"), one per non-blank chunk of `split_text`.
Posting a part is I/O that must keep its order, so it runs as a queued operation
of the session; editing a part that exists is handed to the `EditScheduler`, which
spaces and coalesces edits, so text deltas can arrive as fast as the model streams.
A chunk that is no longer the last one can never change again (the split is stable
under appending), so it is sent as a final edit; the last chunk becomes final when
the answer is done.

The same stability makes the split cheap to keep: while the last chunk plus a delta
still fits in a message, the split of the longer text is the old one with the delta
appended to its last chunk, so the text is only split again when it crosses into a
new part, not on every delta (which would make a long answer quadratic). That holds for
`split_chunks`, which keeps blank chunks (a blank last one may yet fill up); only
the chunks with something in them become messages.

When calls follow an answer nobody has seen yet (the model's "let me check" before its tools), the
edge takes it (`fold`) onto the calls' status message, so a tool turn posts twice, not three times;
a complete answer not posted yet waits (`fold_wait_s`) until the edge says whether calls follow
(`fold`) or not (`release`). Both waits are bounded in time, and a loaded process can outlast them
(the words stream for longer than the first post's wait, the calls' commit takes longer than the
fold's): the words are then posted first, and when calls follow, their one message is handed over
(`adopt`) and rewritten as the status message, so the turn still posts twice. Until the edge has
said which, that message is not sealed.

The first post waits up to `first_post_wait_s` for the answer to finish: every
`chat.update` spends a workspace-wide budget of about 50 a minute, and most answers
take under a second to stream, so they land whole in one post and need no edit at
all ("is thinking…" shows meanwhile). A longer answer is posted after that wait and
then edited about once a second.

A part whose post does not land is not lost. A complete part is posted as owed, so
the outbox delivers it if Slack does not take it now; a part still growing waits
(`deferred`) for the end of the answer and is then posted, complete, the same way.
Complete parts not posted yet when the turn ends are handed over (`owe_rest`) to be owed
by the turn's last save, and never posted here.
When the answer ends while its calls' final states are still queued behind the edit
budget, its last part carries those outcomes, so it never sits next to a status
message that still reads "running". The turn's final answer gets its feedback buttons
(`close_with`) under its last part once the turn ends, in the edit that seals it if that
one is still waiting for the budget.

An answer that grows past `overflow_chars` stops growing in Slack: the parts
already shown are sealed as they are, and when it is done the whole of it is
uploaded as a file; if that fails, the rest is posted as messages after all.

A quiet session (the heartbeat's) is not streamed: its answer is posted once, when
done, and not at all if it is exactly the quiet word. Whether a session is quiet is
asked lazily, because its address may still be loading when the first words arrive;
the first post is queued behind that load, so it always knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from bot.slack.render import Block, answer_message
from bot.slack.split import MESSAGE_LIMIT, split_chunks, visible

log = logging.getLogger(__name__)

FIRST_POST_WAIT_S = 1.0


class AnswerThread(Protocol):
    """What one streamed answer needs of its session's thread; the edge hands each answer one."""

    def enqueue(self, operation: Callable[[], Awaitable[None]]) -> None:
        """Queue an operation behind the session's other Slack operations."""

    async def post(self, text: str, blocks: list[Block], owed: bool) -> tuple[str, str] | None:
        """Post a part (run inside the queue); (channel, ts), or None if it did not land (owed: the outbox has it)."""

    def edit(self, channel: str, ts: str, text: str, blocks: list[Block], final: bool) -> None:
        """Ask for a part to show this; never waits (the edit budget spaces and coalesces edits)."""

    def quiet_word(self) -> str | None:
        """The answer that means "nothing to say" in a quiet session (the heartbeat's); None elsewhere."""

    def outcomes(self) -> Block | None:
        """The outcomes of the session's calls whose final states Slack does not show yet."""

    async def upload(self, text: str, continued: bool) -> bool:
        """Share a whole answer too long for messages as a file (`continued`: its start is shown); False if not."""


@dataclass(slots=True)
class _Part:
    channel: str | None  # None: handed to the outbox, which posts it complete
    ts: str | None
    shown: str
    final: bool


@dataclass(slots=True)
class ReplyStream:
    """The Slack side of one streamed answer: which messages it is, what each shows, when each is final.

    The model streams faster than Slack lets a message change, and a long answer becomes several
    messages; keeping that bookkeeping here lets the edge hand over deltas as they come."""

    thread: AnswerThread
    first_post_wait_s: float = FIRST_POST_WAIT_S
    overflow_chars: int | None = None
    """Past this length the answer is uploaded whole instead; None: never (nor after an upload failed)."""
    text: str = field(default="", init=False)
    done: bool = field(default=False, init=False)
    parts: list[_Part] = field(default_factory=list, init=False)
    _raw: list[str] = field(default_factory=list, init=False)  # split_chunks(self.text), kept up to date by add()
    _chunks: list[str] = field(default_factory=list, init=False)  # the chunks of _raw not blank: one message each
    _spoken: bool = field(default=False, init=False)  # anything but whitespace yet
    _finished: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _flush_queued: bool = field(default=False, init=False)
    _deferred: bool = field(default=False, init=False)  # a part still growing did not land: the rest waits
    _posting: bool = field(default=False, init=False)  # a part's post is under way (it owes itself before it is tried)
    _handed: range = field(default=range(0), init=False)  # the parts owed elsewhere (`owe_rest`), never posted here
    _closing: list[Block] = field(default_factory=list, init=False)  # under the last part: the feedback buttons
    _folded: bool = field(default=False, init=False)  # shown in another message (`fold`): nothing is posted here
    fold_wait_s: float = 0.0
    """How long a complete answer not posted yet waits to hear whether calls follow it (`fold`) or not (`release`)."""
    _released: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def add(self, delta: str) -> None:
        self.text += delta
        self._spoken = self._spoken or bool(delta.strip())
        if self._raw and len(self._raw[-1]) + len(delta) <= MESSAGE_LIMIT:
            self._raw[-1] += delta
        else:
            self._raw = split_chunks(self.text)
        self._chunks = visible(self._raw)
        self._sync()

    def finish(self) -> None:
        """The answer is complete: every part becomes final (and a quiet answer is posted, if it says anything)."""
        if not self.done:
            self.done = True
            self._finished.set()
            self._sync()

    def rate(self, block: Block) -> None:
        """This is the turn's final answer: `block` (its feedback buttons) goes under its last part, in the
        parts handed over to be owed as in those posted here."""
        self._closing = [block]

    async def close_with(self) -> None:
        """Edit the rating block into the last part if that part is shown already (queued behind the answer's
        own posts); an answer shown otherwise (uploaded, held back) goes without it."""
        shown = self.parts and len(self.parts) == len(self._chunks)
        if not self.done or not shown or self._held_back() or self._oversized():
            return
        last = self.parts[-1]
        if last.channel is not None and last.ts is not None:
            text, blocks = self._message(len(self.parts) - 1, last.shown, True)
            self.thread.edit(last.channel, last.ts, text, blocks, True)

    def owe_rest(self) -> list[tuple[str, list[Block] | None]]:
        """The complete parts not posted (nor being posted), as messages, handed to the caller to owe and deliver.

        They stay in `parts` as owed elsewhere, so this stream never posts them; a part still growing is
        not handed (it is posted, owed, when it is complete). Nothing is handed of an answer not shown as
        messages (held back while quiet, or grown past `overflow_chars`)."""
        if not self._spoken or self._held_back() or self._oversized():
            return []
        first = len(self.parts) + self._posting
        handed: list[tuple[str, list[Block] | None]] = []
        for index in range(first, len(self._chunks)):
            if not (self.done or index < len(self._chunks) - 1):
                break
            handed.append(self._message(index, self._chunks[index], True))
        if handed:
            self._handed = range(first, first + len(handed))
            self._take_handed()
        return handed

    def fold(self, max_chars: int) -> str | None:
        """Take the whole answer to be shown in another message (a status message), if none of it is shown yet and
        it is complete, within `max_chars`, and not held back; this stream then posts nothing. None: not taken."""
        if (
            not self.done
            or self.parts
            or self._posting
            or self._handed
            or not self._spoken
            or len(self.text) > max_chars
            or self._held_back()
            or self.thread.quiet_word() is not None
        ):
            return None
        self._folded = True
        self._released.set()
        return self.text.strip()

    def adopt(self, max_chars: int) -> tuple[str, str, str] | None:
        """Hand over the message this answer was posted as, to be rewritten as the status message of the calls that
        follow it (`fold` came too late: the words were posted first): (channel, ts, its text) if the answer is
        complete, one message that landed, within `max_chars` and not held back; this stream then edits nothing.
        None: not taken, nor once the edge has said that no calls follow it (`release`)."""
        if self._released.is_set() or not self.done or len(self.parts) != 1 or len(self._chunks) != 1:
            return None
        if len(self.text) > max_chars:
            return None
        part = self.parts[0]
        if part.channel is None or part.ts is None or self._held_back() or self.thread.quiet_word() is not None:
            return None
        self._folded = True
        self._released.set()
        return part.channel, part.ts, self.text.strip()

    def release(self) -> None:
        """No calls follow this answer (the turn ended, or the model was asked again): it is posted as it is."""
        if not self._released.is_set():
            self._released.set()
            self._sync()

    def finished_posting(self) -> bool:
        """Whether every part is posted or owed: nothing more can come of this stream."""
        shown_elsewhere = self._held_back() or self._oversized()  # a quiet word, or an upload
        return self.done and not self._posting and (len(self.parts) >= len(self._chunks) or shown_elsewhere)

    def _take_handed(self) -> None:
        """Count the handed parts as owed elsewhere once the parts before them are there."""
        while not self._posting and len(self.parts) in self._handed:
            self.parts.append(_Part(None, None, self._chunks[len(self.parts)], True))

    def _held_back(self) -> bool:
        """A quiet answer shows nothing until done, and nothing at all if it is just the quiet word; a folded one,
        nothing here."""
        if self._folded:
            return True
        quiet = self.thread.quiet_word()
        return quiet is not None and (not self.done or self.text.strip() == quiet)

    def _oversized(self) -> bool:
        return self.overflow_chars is not None and len(self.text) > self.overflow_chars

    def _sync(self) -> None:
        """Edit the parts that exist; queue one flush for the parts that do not exist yet."""
        if not self._spoken or self._held_back() or (self._deferred and not self.done):
            return
        if self._oversized():
            if self.done and not self._flush_queued:
                self._flush_queued = True
                self.thread.enqueue(self._spill)
            return
        chunks = self._chunks
        # A complete one-message answer posted before it was complete may yet become the status message of calls
        # that follow it (`adopt`): it is left as it is until the edge says whether they do (`release`), then
        # sealed in one edit.
        waiting = self.done and self.fold_wait_s > 0 and len(chunks) == 1 and not self._released.is_set()
        for index, chunk in enumerate(chunks):
            sealed = self.done or index < len(chunks) - 1
            if index >= len(self.parts):
                if not self._flush_queued:
                    self._flush_queued = True
                    self.thread.enqueue(self._flush)
                return
            part = self.parts[index]
            if waiting or part.final or (part.shown == chunk and not sealed) or part.channel is None or part.ts is None:
                continue
            text, blocks = self._message(index, chunk, sealed)
            self.thread.edit(part.channel, part.ts, text, blocks, sealed)
            part.shown, part.final = chunk, sealed

    async def _flush(self) -> None:
        """Post the missing parts in order, with the text as it is now; then catch up with edits."""
        if not self.parts and not self.done and len(self._chunks) == 1:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._finished.wait(), self.first_post_wait_s)
        if not self.parts and self.done and self.fold_wait_s > 0 and len(self._chunks) == 1:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._released.wait(), self.fold_wait_s)
        try:
            while not self._held_back() and not self._oversized():
                self._take_handed()
                chunks = self._chunks
                index = len(self.parts)
                if index >= len(chunks):
                    break
                chunk = chunks[index]
                sealed = self.done or index < len(chunks) - 1
                if self._deferred and not sealed:
                    break
                text, blocks = self._message(index, chunk, sealed)
                self._posting = True
                try:
                    where = await self.thread.post(text, blocks, sealed)
                finally:
                    self._posting = False
                if where is not None:
                    self.parts.append(_Part(*where, chunk, sealed))
                elif sealed:
                    self.parts.append(_Part(None, None, chunk, True))  # owed: the outbox has it
                else:
                    log.warning("part %d of an answer did not land; it is posted when the answer is done", index + 1)
                    self._deferred = True
                    break
        finally:
            self._flush_queued = False
        self._sync()

    def _message(self, index: int, chunk: str, sealed: bool) -> tuple[str, list[Block]]:
        """A part as Slack shows it; the answer's last part, once complete, with the outcomes still unseen."""
        text, blocks = answer_message(chunk, streaming=not sealed)
        if self.done and index == len(self._chunks) - 1:
            if (outcomes := self.thread.outcomes()) is not None:
                blocks = [*blocks, outcomes]
            blocks = [*blocks, *self._closing]
        return text, blocks

    async def _spill(self) -> None:
        """Seal the parts shown as they are and hand the whole answer over; on failure post the rest after all."""
        for part in self.parts:
            if not part.final and part.channel is not None and part.ts is not None:
                text, blocks = answer_message(part.shown)
                self.thread.edit(part.channel, part.ts, text, blocks, True)
            part.final = True
        taken = await self.thread.upload(self.text, bool(self.parts))
        self._flush_queued = False
        if not taken:
            self.overflow_chars = None
            self._sync()
