"""What the interactive console shows: finished lines printed above the prompt, live rows just over it.

Everything that is settled (the echo of a typed line, a finished answer row, a call's
final state, a notice, a reminder) is printed once, above the prompt, and stays in the
scrollback. What still changes (the answer row being streamed, the model thinking, the
calls running) is not printed at all: it is drawn in the prompt's own area, which
prompt_toolkit repaints in place, so no repaint leaves a stale copy and none touches
what the person is typing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bot.agent.engine import Delivery
from bot.calls.summary import call_label, icon, state_text
from bot.console.approvals import ConsoleApprovals
from bot.console.fit import break_row, fit
from bot.console.saved_files import shared_line
from bot.toolcall import CallStatus, ToolCall
from bot.types import LineKind, OwedLine, OwedPost, TurnOutcome
from tools.base import SharedFile

ANSWER_PREFIX = "assistant: "
ACK = "👀"
"""A line typed mid-turn is acknowledged as Slack does: the model reads it at its next step."""


class TerminalOutput:
    """The `EngineOutput` of a terminal session; `live_rows()` is what the prompt draws above its input line."""

    def __init__(
        self,
        *,
        print_line: Callable[[str], None],
        refresh: Callable[[], None],
        columns: Callable[[], int],
        thinking_s: Callable[[], float | None] = lambda: None,
        files_dir: Path = Path("files"),
    ) -> None:
        """`files_dir` is where files a tool shares are saved (the daemon's BOT_DATA_DIR/files)."""
        self._files_dir = files_dir
        self._print = print_line
        self.approvals = ConsoleApprovals(print_line)
        self._refresh = refresh
        self._columns = columns
        self._thinking_s = thinking_s
        self.turns_ended = 0
        """Turns finished so far: Ctrl-C counts its presses per turn (bot/console/interrupts.py)."""
        self._open: dict[str, ToolCall] = {}
        self._finished: set[str] = set()
        self._turns: set[str] = set()
        """Sessions with a turn running: until it ends, a line sent is a note to it, so the screen says so."""
        self._row: str | None = None
        """The answer row being streamed; None when no answer is."""

    # -- what the prompt draws ----------------------------------------------------------------

    def live_rows(self, waits_for_slot: Callable[[ToolCall], bool] = lambda call: True) -> list[str]:
        """The rows above the input line, each cut to one screen row; `waits_for_slot` (the core's caps) tells
        a `pending` call that really waits for a slot from one about to start."""
        columns = self._columns()
        rows = [self._row] if self._row else []
        parts = []
        if (thinking_s := self._thinking_s()) is not None:
            parts.append(f"✳ thinking… {thinking_s:.0f}s")
        elif self._turns and not self._open:
            parts.append("✳ working…")
        parts.extend(self._call_part(call, waits_for_slot) for call in self._open.values())
        if parts:
            rows.append(" | ".join(parts))
        return [fit(row, columns) for row in rows]

    @staticmethod
    def _call_part(call: ToolCall, waits_for_slot: Callable[[ToolCall], bool]) -> str:
        if call.status is CallStatus.PENDING and not waits_for_slot(call):
            return f"⏳ {call_label(call)} starting"
        return f"{icon(call)} {call_label(call)} {state_text(call)}"

    # -- what the chat says -----------------------------------------------------------------

    def said(self, line: str, delivery: Delivery) -> None:
        """Echo what the person typed, with the acknowledgement when it went into a running turn."""
        if delivery is Delivery.INJECTED:
            self._print(f"you: {line}  {ACK}")
        elif delivery is Delivery.REFUSED:
            self._print(f"you: {line}  (not sent: the console is shutting down)")
        else:
            self._print(f"you: {line}")

    def line(self, text: str) -> None:
        self._print(text)

    # -- EngineOutput -----------------------------------------------------------------------

    def turn_started(self, session_key: str) -> None:
        self._turns.add(session_key)
        self._refresh()

    def file_shared(self, session_key: str, file: SharedFile) -> None:
        """Saved under BOT_DATA_DIR/files, and the path printed: a terminal has nowhere to upload it."""
        self._print(shared_line(file, self._files_dir))

    def model_call_started(self, session_key: str) -> None:
        """Nothing to do: the thinking indicator follows `WatchedProvider`, which also sees each request end."""

    def text_delta(self, session_key: str, delta: str) -> None:
        row = (self._row if self._row is not None else ANSWER_PREFIX) + delta
        *finished, row = row.split("\n")
        for text in finished:
            self._print(text)
        columns = self._columns()
        while (split := break_row(row, columns)) is not None:
            full, row = split
            self._print(full)
        self._row = row
        self._refresh()

    def text_done(self, session_key: str) -> None:
        if self._row is not None:
            if self._row:
                self._print(self._row)
            self._row = None
            self._refresh()

    def calls_started(self, session_key: str, calls: list[ToolCall]) -> None:
        for call in calls:
            self.call_changed(call)

    def call_changed(self, call: ToolCall) -> None:
        self.approvals.changed(call)
        if call.is_final:
            self._open.pop(call.id, None)
            if call.id not in self._finished:  # a call failed at submit is published, then started
                self._finished.add(call.id)
                self._print(f"{icon(call)} {call_label(call)} — {state_text(call)}")
        else:
            self._open[call.id] = call
        self._refresh()

    def notice(self, session_key: str, text: str) -> None:
        self._print(text)

    def lines_owed(self, lines: list[tuple[int, OwedLine]]) -> bool:
        """Printed is delivered: a terminal cannot fail to show them."""
        for _, line in lines:
            self._print(f"⏰ {line.text}" if line.kind is LineKind.REMINDER else line.text)
        return True

    def owed_posts(self, outcome: TurnOutcome) -> list[OwedPost]:
        """A terminal cannot fail to show a line: nothing is left to owe."""
        return []

    def turn_finished(self, outcome: TurnOutcome) -> None:
        self._turns.discard(outcome.session_key)
        self.turns_ended += 1
        self.text_done(outcome.session_key)
        if outcome.cancelled_by:
            self._print(f"(turn cancelled by {outcome.cancelled_by})")
        self._refresh()
