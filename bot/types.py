"""The two seams of the engine: the model provider it calls, and the edge it reports to.

Both are Protocols so the engine imports neither anthropic nor Slack; tests and
other edges plug in their own implementations.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from bot.toolcall import ToolCall
    from tools.base import SharedFile

JSON = Any
Message = dict[str, JSON]
TextSink = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Speaker:
    """Who wrote a line the model reads: the edge's user id and the name people know them by."""

    id: str
    name: str = ""


@dataclass(frozen=True, slots=True)
class Billing:
    """Whom a model call is for, so its tokens are booked to the session, turn and person."""

    session_key: str
    turn_id: str | None = None
    requester: str | None = None


@dataclass(frozen=True, slots=True)
class ModelRequest:
    system: str
    messages: list[Message]
    tools: list[dict[str, JSON]]
    tool_choice: dict[str, JSON] | None = None
    max_tokens: int | None = None
    billing: Billing | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one model call (or a sum of them) cost, split the way the API bills them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Everything the request sent, cached or not: the size of the context."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def describe(self) -> str:
        return (
            f"in={self.input_tokens} out={self.output_tokens} "
            f"cache_read={self.cache_read_tokens} cache_write={self.cache_write_tokens}"
        )


@dataclass(frozen=True, slots=True)
class ModelReply:
    """One finished model response: its content blocks as API dicts, why it stopped, and what it cost.

    `incomplete_tool_ids` names tool_use blocks whose input was cut off (the output limit,
    a broken stream) or does not parse: their `input` is left empty, and they must not run.
    """

    content: list[dict[str, JSON]]
    stop_reason: str
    incomplete_tool_ids: frozenset[str] = frozenset()
    usage: Usage = Usage()
    model: str = ""
    first_token_s: float | None = None
    """From sending the request to the first content block of the answer (None: not measured)."""

    @property
    def text(self) -> str:
        return "".join(block["text"] for block in self.content if block.get("type") == "text")

    @property
    def tool_uses(self) -> list[dict[str, JSON]]:
        return [block for block in self.content if block.get("type") == "tool_use"]


class Provider(Protocol):
    """Streams one model response; raises `ModelError` with a user-fit message when it cannot."""

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelReply: ...


@dataclass(slots=True)
class TurnOutcome:
    """How a turn ended, for the edge that started it."""

    session_key: str
    text: str = ""
    stop_reason: str = ""
    error: str | None = None
    cancelled_by: str | None = None
    pending_call_ids: list[str] = field(default_factory=list)
    iterations: int = 0
    usage: Usage = Usage()
    owed_posts: list[int] = field(default_factory=list)
    """The store's ids of the `EngineOutput.owed_posts` the turn's last save owed, in order: the edge's to deliver."""
    turn_id: str | None = None
    """The turn's id in the store (`session#n`); None when the turn failed before it had one."""


@dataclass(frozen=True, slots=True)
class OwedPost:
    """A message an edge has decided to post and not yet owed in the store, as the store keeps it
    (bot/store/outbox.py): where (`channel`, `thread_ts`, the edge's address) and what."""

    session_key: str
    channel: str
    thread_ts: str | None
    text: str
    blocks: list[dict[str, JSON]] | None = None


class LineKind(StrEnum):
    """How an edge shows a line the engine owes a session."""

    REMINDER = "reminder"
    """A reminder's own words, for the person who asked: the edge adds the mention that pings them."""
    NOTICE = "notice"
    """The engine's word about its schedule (a missed reminder, a refused wait, a cron that ends)."""


@dataclass(frozen=True, slots=True)
class OwedLine:
    """A line the engine owes a session, decided by a firing and owed in the store by the transaction that
    claims it (the outbox, bot/store/outbox.py): what to say, not where. The edge finds the session's
    address and renders it when it delivers, so the engine needs to know nothing of Slack."""

    session_key: str
    kind: LineKind
    text: str
    requester: str | None = None
    """Whom a reminder is for; None for rows stored without one (the edge then names the latest speaker)."""


class EngineOutput(Protocol):
    """Everything the engine tells an edge. Calls are synchronous and must not block:
    an edge that does I/O queues it, so a slow Slack never slows the turn loop."""

    def turn_started(self, session_key: str) -> None: ...

    def model_call_started(self, session_key: str) -> None:
        """The turn asks the model again (once per step): an edge shows that it is thinking, each time."""

    def text_delta(self, session_key: str, delta: str) -> None: ...

    def text_done(self, session_key: str) -> None: ...

    def calls_started(self, session_key: str, calls: list[ToolCall]) -> None: ...

    def call_changed(self, call: ToolCall) -> None: ...

    def notice(self, session_key: str, text: str) -> None:
        """A short line for the people in the session: an error, a cut-off answer."""

    def lines_owed(self, lines: list[tuple[int, OwedLine]]) -> bool:
        """Lines a firing owed in the store (a due reminder, a missed one's notice), with their outbox ids,
        in order. True when they are shown already (a terminal prints them), so the store's debt is settled
        at once; False when the edge delivers and settles them itself, however long it takes (Slack's outbox).
        """

    def file_shared(self, session_key: str, file: SharedFile) -> None:
        """A file a tool handed over for the people in the session (Slack uploads it; the console saves it)."""

    def owed_posts(self, outcome: TurnOutcome) -> list[OwedPost]:
        """What the edge has decided to say in the turn's session and has not owed in a store yet, in order.

        Asked right before the turn's last save, which owes them in the transaction that marks the
        session's messages answered: nothing decided lives only in memory once a message counts as
        answered. From then on they are the store's; `turn_finished` names their ids
        (`TurnOutcome.owed_posts`). An edge that cannot fail to show a line (a terminal) owes nothing.
        The turn's `outcome` so far says how it ended (an edge marks a rated answer by it).
        """

    def turn_finished(self, outcome: TurnOutcome) -> None: ...


CallListener = Callable[["ToolCall"], None]
TimezoneLookup = Callable[[str], Awaitable[str | None]]
SessionFilter = Callable[[str], bool]
"""Whether a session key belongs to the edge running this process (its scheduler fires only those)."""
"""Given a session key, the time zone of the person who asked (e.g. from Slack's users.info)."""
