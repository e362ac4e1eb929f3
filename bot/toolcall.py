"""The tool-call entity and its lifecycle.

A call moves `pending → running → completed | failed | cancelled`; `orphaned` is
given at start-up to calls a previous process left unfinished. Final states are
never left again: `ToolCall.transition` refuses, and the store refuses too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from bot.clock import utcnow
from tools.base import blocks_as_text, result_blocks

JSON = Any

QUESTION_TOOL = "ask_user"
SHUTDOWN = "shutdown"
"""Who cancels the turns and calls a stopping process did not let finish: they stay owed (a call waiting for a
person keeps waiting, for the next start), unlike anyone else's cancel."""
"""The tool whose call is a question for a person: it waits, like an approval, for their word, which is its result."""
PROGRESS_LOG_LIMIT = 200
PROGRESS_PAYLOAD_MAX_CHARS = 2_000


class CallStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ORPHANED = "orphaned"

    @property
    def is_final(self) -> bool:
        return self not in (CallStatus.PENDING, CallStatus.RUNNING)


class Decision(StrEnum):
    """Why a call may run (or may not): what the tool policy said, and what a person said when it asked."""

    ALLOWED = "allowed"
    ASKED = "asked"
    """Waiting for a person's word (an approver's, or a question's answer); a call left here by a restart is still
    waiting."""
    APPROVED = "approved"
    DENIED = "denied"
    ANSWERED = "answered"
    """A question (`ask_user`) that a person answered: the answer is the call's result."""
    TIMED_OUT = "timed_out"


class ProgressKind(StrEnum):
    STARTED = "started"
    LOG = "log"
    PARTIAL = "partial"
    HEARTBEAT = "heartbeat"


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _parse(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


@dataclass(slots=True)
class ProgressEntry:
    at: datetime
    kind: ProgressKind
    payload: JSON

    def to_json(self) -> dict[str, JSON]:
        return {"at": self.at.isoformat(), "kind": self.kind.value, "payload": self.payload}

    @classmethod
    def from_json(cls, data: dict[str, JSON]) -> ProgressEntry:
        return cls(datetime.fromisoformat(data["at"]), ProgressKind(data["kind"]), data["payload"])


@dataclass(slots=True)
class ToolCall:
    """One call of one tool, keyed by the model's own `tool_use` id."""

    id: str
    session_key: str
    turn_id: str
    tool_name: str
    input: dict[str, JSON]
    parent_id: str | None = None
    status: CallStatus = CallStatus.PENDING
    created_at: datetime = field(default_factory=utcnow)
    started_at: datetime | None = None
    completed_at: datetime | None = None
    result: JSON = None
    error: str | None = None
    timed_out: bool = False
    cancelled_by: str | None = None
    delivered: bool = False
    progress: list[ProgressEntry] = field(default_factory=list)
    requester: str | None = None
    decision: Decision = Decision.ALLOWED
    decided_by: str | None = None
    """The policy rule that allowed or denied the call, or the person who approved or denied it."""
    approvers: list[str] = field(default_factory=list)
    """Who may decide a call that asks for an approval, or answer a question."""

    @property
    def is_question(self) -> bool:
        return self.tool_name == QUESTION_TOOL

    @property
    def options(self) -> list[str]:
        """A question's options as the model gave them (its schema keeps them strings); empty for free text."""
        options = self.input.get("options") if self.is_question else None
        return [str(option) for option in options] if isinstance(options, list) else []

    @property
    def awaiting_person(self) -> bool:
        """Waiting for a person's word, which a restart does not end: an approval or a question's answer."""
        return self.decision is Decision.ASKED and not self.is_final

    @property
    def awaiting_approval(self) -> bool:
        return self.awaiting_person and not self.is_question

    @property
    def awaiting_answer(self) -> bool:
        return self.awaiting_person and self.is_question

    @property
    def state(self) -> str:
        """The status as the model and the audit read it: a call waiting for a person says for what."""
        if self.awaiting_person:
            return "awaiting_answer" if self.is_question else "awaiting_approval"
        return self.status.value

    @property
    def is_final(self) -> bool:
        return self.status.is_final

    def transition(self, status: CallStatus) -> bool:
        """Move to `status` if the lifecycle allows it; a final state is never left."""
        if self.status.is_final or status == self.status:
            return False
        if status is CallStatus.RUNNING and self.status is not CallStatus.PENDING:
            return False
        self.status = status
        now = utcnow()
        if status is CallStatus.RUNNING:
            self.started_at = now
        elif status.is_final:
            self.completed_at = now
        return True

    def add_progress(self, kind: ProgressKind, payload: JSON) -> ProgressEntry:
        """Append a progress entry, keeping only the newest `PROGRESS_LOG_LIMIT` and capping big payloads."""
        if isinstance(payload, str) and len(payload) > PROGRESS_PAYLOAD_MAX_CHARS:
            payload = payload[:PROGRESS_PAYLOAD_MAX_CHARS] + "…"
        entry = ProgressEntry(utcnow(), kind, payload)
        self.progress.append(entry)
        if len(self.progress) > PROGRESS_LOG_LIMIT:
            del self.progress[: len(self.progress) - PROGRESS_LOG_LIMIT]
        return entry

    @property
    def elapsed_s(self) -> float | None:
        if self.started_at is None:
            return None
        return ((self.completed_at or utcnow()) - self.started_at).total_seconds()

    def status_view(self, *, include_progress: bool = True) -> dict[str, JSON]:
        """The shape `get_tool_call_status` returns to the model."""
        view: dict[str, JSON] = {
            "tool_call_id": self.id,
            "status": self.state,
            "tool_name": self.tool_name,
            "started_at": _iso(self.started_at),
            "completed_at": _iso(self.completed_at),
            "result": _viewable(self.result) if self.status is CallStatus.COMPLETED else None,
            "is_final": self.is_final,
        }
        if self.error:
            view["error"] = self.error
        if self.decision is not Decision.ALLOWED:
            view["decision"] = self.decision.value
            view["decided_by"] = self.decided_by
        if include_progress:
            view["progress"] = [entry.to_json() for entry in self.progress]
        return view

    @property
    def outcome(self) -> str:
        """How the call ended (or where it stands), in the audit trail's words."""
        if self.status is CallStatus.FAILED and self.timed_out:
            return "timed_out"
        return self.state

    def audit_view(self) -> dict[str, JSON]:
        """The call in the audit trail: who asked, what decided it, what it ran with, how it ended."""
        return {
            "call_id": self.id,
            "session": self.session_key,
            "tool": self.tool_name,
            "arguments": self.input,
            "requester": self.requester,
            "decision": self.decision.value,
            "decided_by": self.decided_by,
            "approvers": self.approvers,
            "outcome": self.outcome,
            "error": self.error,
            "at": self.created_at.isoformat(),
            "completed_at": _iso(self.completed_at),
        }

    def to_record(self) -> dict[str, JSON]:
        """Everything the store keeps, as JSON-friendly values."""
        return {
            "id": self.id,
            "session_key": self.session_key,
            "turn_id": self.turn_id,
            "tool_name": self.tool_name,
            "input": self.input,
            "parent_id": self.parent_id,
            "status": self.status.value,
            "created_at": _iso(self.created_at),
            "started_at": _iso(self.started_at),
            "completed_at": _iso(self.completed_at),
            "result": self.result,
            "error": self.error,
            "timed_out": self.timed_out,
            "cancelled_by": self.cancelled_by,
            "delivered": self.delivered,
            "progress": [entry.to_json() for entry in self.progress],
            "requester": self.requester,
            "decision": self.decision.value,
            "decided_by": self.decided_by,
            "approvers": self.approvers,
        }

    @classmethod
    def from_record(cls, data: dict[str, JSON]) -> ToolCall:
        return cls(
            id=data["id"],
            session_key=data["session_key"],
            turn_id=data["turn_id"],
            tool_name=data["tool_name"],
            input=data["input"],
            parent_id=data["parent_id"],
            status=CallStatus(data["status"]),
            created_at=_parse(data["created_at"]) or utcnow(),
            started_at=_parse(data["started_at"]),
            completed_at=_parse(data["completed_at"]),
            result=data["result"],
            error=data["error"],
            timed_out=bool(data["timed_out"]),
            cancelled_by=data["cancelled_by"],
            delivered=bool(data["delivered"]),
            progress=[ProgressEntry.from_json(item) for item in data["progress"]],
            requester=data["requester"],
            decision=Decision(data["decision"]),
            decided_by=data["decided_by"],
            approvers=list(data["approvers"]),
        )


def _viewable(result: JSON) -> JSON:
    """A result as JSON for the model to read: content blocks (an MCP image) as their text, never base64."""
    blocks = result_blocks(result)
    return blocks_as_text(blocks) if blocks is not None else result
