"""The two seams of the engine: the model provider it calls, and the edge it reports to.

Both are Protocols so the engine imports neither anthropic nor Slack; tests and
other edges plug in their own implementations.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from bot.calls.models import ToolCall
    from tools.base import SharedFile

JSON = Any
Message = dict[str, JSON]
TextSink = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    system: str
    messages: list[Message]
    tools: list[dict[str, JSON]]
    tool_choice: dict[str, JSON] | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ModelReply:
    """One finished model response: its content blocks as API dicts and why it stopped."""

    content: list[dict[str, JSON]]
    stop_reason: str

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


class EngineOutput(Protocol):
    """Everything the engine tells an edge. Calls are synchronous and must not block:
    an edge that does I/O queues it, so a slow Slack never slows the turn loop."""

    def turn_started(self, session_key: str) -> None: ...

    def text_delta(self, session_key: str, delta: str) -> None: ...

    def text_done(self, session_key: str) -> None: ...

    def calls_started(self, session_key: str, calls: list[ToolCall]) -> None: ...

    def call_changed(self, call: ToolCall) -> None: ...

    def notice(self, session_key: str, text: str) -> None:
        """A short line for the people in the session: an error, a cut-off answer."""

    def reminder(self, session_key: str, text: str, requester: str | None = None) -> None:
        """A due reminder, posted without a model call; the edge mentions `requester`, who asked for it."""

    def file_shared(self, session_key: str, file: SharedFile) -> None:
        """A file a tool handed over for the people in the session (Slack uploads it; the console saves it)."""

    def turn_finished(self, outcome: TurnOutcome) -> None: ...


CallListener = Callable[["ToolCall"], None]
TimezoneLookup = Callable[[str], Awaitable[str | None]]
SessionFilter = Callable[[str], bool]
"""Whether a session key belongs to the edge running this process (its scheduler fires only those)."""
"""Given a session key, the time zone of the person who asked (e.g. from Slack's users.info)."""
