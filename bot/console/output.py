"""Printing the engine's output in a terminal: streamed text, and calls on one status line."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from bot.calls.models import CallStatus, ToolCall
from bot.calls.summary import call_label, icon, state_text
from bot.console.saved_files import save_shared
from bot.types import TurnOutcome
from tools.base import SharedFile


class ConsoleOutput:
    """On a terminal the status line is redrawn in place; into a pipe, each change of state is a line."""

    def __init__(self, stream: TextIO, *, interactive: bool, files_dir: Path) -> None:
        self._out = stream
        self._files_dir = files_dir
        self._interactive = interactive
        self._status_shown = False
        self._in_text = False
        self._last_state: dict[str, str] = {}
        self._open: dict[str, ToolCall] = {}

    def turn_started(self, session_key: str) -> None:
        self._in_text = False

    def text_delta(self, session_key: str, delta: str) -> None:
        self._clear_status()
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
        if call.is_final:
            self._open.pop(call.id, None)
        else:
            self._open[call.id] = call
        if self._interactive:
            self._redraw_status(call)
        elif call.status is not CallStatus.PENDING and self._last_state.get(call.id) != call.status.value:
            self._last_state[call.id] = call.status.value
            self._line(f"{icon(call)} {call_label(call)} — {state_text(call)}")

    def notice(self, session_key: str, text: str) -> None:
        self._line(text)

    def reminder(self, session_key: str, text: str, requester: str | None = None) -> None:
        self._line(f"⏰ {text}")

    def file_shared(self, session_key: str, file: SharedFile) -> None:
        """Saved under BOT_DATA_DIR/files, and the path printed: a terminal has nowhere to upload it."""
        try:
            path = save_shared(file, self._files_dir)
        except OSError as exc:
            self._line(f"📎 {file.name} could not be saved: {exc.strerror or exc}")
            return
        self._line(f"📎 {file.name} ({len(file.content)} bytes) saved to {path}")

    def turn_finished(self, outcome: TurnOutcome) -> None:
        if outcome.cancelled_by:
            self._line(f"(turn cancelled by {outcome.cancelled_by})")

    def _redraw_status(self, changed: ToolCall) -> None:
        self._clear_status()
        if changed.is_final:
            self._line(f"{icon(changed)} {call_label(changed)} — {state_text(changed)}")
        if self._open:
            summary = " | ".join(f"{icon(c)} {call_label(c)} {state_text(c)}" for c in self._open.values())
            self._write(f"\r\033[K{summary[:200]}")
            self._status_shown = True

    def _clear_status(self) -> None:
        if self._status_shown:
            self._write("\r\033[K")
            self._status_shown = False

    def _line(self, text: str) -> None:
        self._clear_status()
        if self._in_text:
            self._write("\n")
            self._in_text = False
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()
