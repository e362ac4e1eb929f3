"""The piped console's output: streamed text, and one line for each call's change of state.

Into a pipe nothing is redrawn: a reader (or a script) gets plain lines in order.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from bot.calls.summary import call_label, icon, state_text
from bot.console.approvals import ConsoleApprovals
from bot.console.saved_files import shared_line
from bot.toolcall import CallStatus, ToolCall
from bot.types import LineKind, OwedLine, OwedPost, TurnOutcome
from tools.base import SharedFile


class ConsoleOutput:
    def __init__(self, stream: TextIO, *, files_dir: Path) -> None:
        self._out = stream
        self._files_dir = files_dir
        self._in_text = False
        self._last_state: dict[str, str] = {}
        self.approvals = ConsoleApprovals(self.line)

    def turn_started(self, session_key: str) -> None:
        self._in_text = False

    def model_call_started(self, session_key: str) -> None:
        """Nothing to show: the terminal prints the answer as it streams."""

    def text_delta(self, session_key: str, delta: str) -> None:
        if not self._in_text:
            self._write("assistant: ")
            self._in_text = True
        self._write(delta)

    def text_done(self, session_key: str) -> None:
        if self._in_text:
            self._write("\n")
            self._in_text = False

    def calls_started(self, session_key: str, calls: list[ToolCall]) -> None:
        for call in calls:
            self.call_changed(call)

    def call_changed(self, call: ToolCall) -> None:
        self.approvals.changed(call)
        if call.status is not CallStatus.PENDING and self._last_state.get(call.id) != call.status.value:
            self._last_state[call.id] = call.status.value
            self.line(f"{icon(call)} {call_label(call)} — {state_text(call)}")

    def notice(self, session_key: str, text: str) -> None:
        self.line(text)

    def lines_owed(self, lines: list[tuple[int, OwedLine]]) -> bool:
        """Printed is delivered: a terminal cannot fail to show them."""
        for _, line in lines:
            self.line(f"⏰ {line.text}" if line.kind is LineKind.REMINDER else line.text)
        return True

    def file_shared(self, session_key: str, file: SharedFile) -> None:
        """Saved under BOT_DATA_DIR/files, and the path printed: a terminal has nowhere to upload it."""
        self.line(shared_line(file, self._files_dir))

    def owed_posts(self, outcome: TurnOutcome) -> list[OwedPost]:
        """Printed is delivered: nothing is left to owe."""
        return []

    def turn_finished(self, outcome: TurnOutcome) -> None:
        if outcome.cancelled_by:
            self.line(f"(turn cancelled by {outcome.cancelled_by})")

    def line(self, text: str) -> None:
        if self._in_text:
            self._write("\n")
            self._in_text = False
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()
