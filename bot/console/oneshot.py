"""`python -m bot oneshot`: one turn, one JSON object on stdout.

Without `--wait-for-async` it never waits for a background call: at the first
point where the turn would wait, it prints what it has plus a continuation
token and exits; the calls it leaves behind end `orphaned`. `--resume TOKEN`
picks the session up again and the model learns what became of them.

A question the model asks (`ask_user`) is not orphaned: it is left waiting in the
store, reported as `awaiting_answer` with the token, and `--resume TOKEN --answer TEXT`
answers it before the turn goes on. `--answer` on a first run answers the first
question asked in it.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.agent import protocol
from bot.app import open_core
from bot.calls.registry import CallRegistry
from bot.config import Settings
from bot.console.saved_files import save_shared
from bot.errors import ThreadbotError
from bot.text import clean_text
from bot.toolcall import ToolCall
from bot.types import LineKind, OwedLine, OwedPost, TurnOutcome
from tools.base import SharedFile

APPROVED_BY = "oneshot --approve"
ANSWERED_BY = "oneshot --answer"
DENIED_BY = "oneshot without --approve (nobody is there to approve it)"


@dataclass
class CollectingOutput:
    """Keeps what a JSON report needs: the text, every call seen, the files shared, and the errors."""

    files_dir: Path
    text: list[str] = field(default_factory=list)
    calls: dict[str, ToolCall] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    decide: Callable[[ToolCall], object] | None = None
    """Answers a call that waits for an approval (oneshot decides at once: nobody else is there)."""
    answer: Callable[[ToolCall], object] | None = None
    """Answers a question the model asks, when the command line gave the answer."""

    def turn_started(self, session_key: str) -> None:
        self._new_line()

    def model_call_started(self, session_key: str) -> None:
        self._new_line()  # one model call's text never runs into the next one's

    def _new_line(self) -> None:
        if self.text and not self.text[-1].endswith("\n"):
            self.text.append("\n")

    def text_delta(self, session_key: str, delta: str) -> None:
        self.text.append(delta)

    def text_done(self, session_key: str) -> None:
        pass

    def calls_started(self, session_key: str, calls: list[ToolCall]) -> None:
        for call in calls:
            self.calls[call.id] = call

    def call_changed(self, call: ToolCall) -> None:
        self.calls[call.id] = call
        if call.awaiting_approval and self.decide is not None:
            self.decide(call)
        if call.awaiting_answer and self.answer is not None:
            self.answer(call)

    def notice(self, session_key: str, text: str) -> None:
        self.notices.append(text)

    def lines_owed(self, lines: list[tuple[int, OwedLine]]) -> bool:
        """Kept for the JSON on stdout, which is printed: nothing is left to owe."""
        for _, line in lines:
            self.notices.append(f"reminder: {line.text}" if line.kind is LineKind.REMINDER else line.text)
        return True

    def file_shared(self, session_key: str, file: SharedFile) -> None:
        try:
            self.files.append(str(save_shared(file, self.files_dir)))
        except OSError as exc:
            self.notices.append(f"{file.name} could not be saved: {exc.strerror or exc}")

    def owed_posts(self, outcome: TurnOutcome) -> list[OwedPost]:
        """Printed is delivered: nothing is left to owe."""
        return []

    def turn_finished(self, outcome: TurnOutcome) -> None:
        pass


def encode_token(session_key: str, call_ids: list[str]) -> str:
    raw = json.dumps({"session": session_key, "calls": call_ids}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str) -> tuple[str, list[str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return str(data["session"]), [str(call_id) for call_id in data["calls"]]
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise ThreadbotError("the continuation token is not valid") from None


async def oneshot(
    settings: Settings,
    prompt: str | None,
    *,
    session: str | None = None,
    resume: str | None = None,
    wait_for_async: bool = False,
    approve: bool = False,
    answer: str | None = None,
) -> dict[str, Any]:
    """Run the turn and build the report; raises `ThreadbotError` for problems worth a JSON error.

    Nobody is there to approve a call that asks for it: `approve` (`--approve`) approves every one,
    otherwise each is denied at once, and the model is told why."""
    earlier_calls: list[str] = []
    if resume:
        session_key, earlier_calls = decode_token(resume)
    else:
        session_key = f"oneshot:{session or uuid.uuid4().hex[:12]}"
    output = CollectingOutput(files_dir=settings.bot_data_dir / "files")
    # Only a run that waits may fire this session's own waits and reminders; never another session's.
    owns = (lambda key: key == session_key) if wait_for_async else (lambda key: False)
    async with open_core(settings, output, abandon_on_exit=not wait_for_async, owns=owns) as core:
        by = APPROVED_BY if approve else DENIED_BY
        output.decide = lambda call: core.registry.decide(call.id, approve=approve, by=by)
        if resume and await core.store.get_session(session_key) is None:
            raise ThreadbotError(f"nothing to resume: no session {session_key!r} in {settings.db_path}")
        if answer is not None:
            await _answer(core.registry, output, earlier_calls, answer, first_asked=wait_for_async)
        content = [protocol.text_block(clean_text(prompt))] if prompt else []  # argv may hold undecodable bytes
        outcome = await core.engine.run_turn(session_key, content, stop_at_first_wait=not wait_for_async)
        if wait_for_async:
            await core.engine.settle(session_key)
        for call_id in earlier_calls:
            if (call := await core.registry.find(call_id, session_key=session_key)) is not None:
                output.calls.setdefault(call_id, call)
        report = _report(session_key, output, outcome)
    return report


async def _answer(
    registry: CallRegistry, output: CollectingOutput, earlier: list[str], text: str, *, first_asked: bool
) -> None:
    """`--answer`: the oldest question the token left waiting gets it now, before the turn reads its result;
    without one, and `first_asked` (a run that waits for its calls), the first question this run's turn asks
    gets it as it is asked. A run that stops at the first wait would leave that answer half taken."""
    waiting = [call for call_id in earlier if (call := registry.get(call_id)) is not None and call.awaiting_answer]
    if waiting:
        registry.answer(waiting[0].id, text, by=ANSWERED_BY)
        await registry.wait_final(waiting[0].id)
        return
    if not first_asked:
        raise ThreadbotError("--answer needs a question to answer: --resume TOKEN of a run that asked one")

    def once(call: ToolCall) -> None:
        output.answer = None
        registry.answer(call.id, text, by=ANSWERED_BY)

    output.answer = once


def _report(session_key: str, output: CollectingOutput, outcome: TurnOutcome | None) -> dict[str, Any]:
    pending = outcome.pending_call_ids if outcome else []
    report: dict[str, Any] = {
        "session": session_key,
        "text": "".join(output.text).strip(),
        "tool_calls": [
            {
                "id": call.id,
                "name": call.tool_name,
                "input": call.input,
                "status": call.state,
                "result": call.result,
                "error": call.error,
            }
            for call in output.calls.values()
        ],
        "continuation": encode_token(session_key, pending) if pending else None,
    }
    if output.files:
        report["files"] = output.files
    if output.notices:
        report["notices"] = output.notices
    if outcome is not None and outcome.error:
        report["error"] = outcome.error
    return report
