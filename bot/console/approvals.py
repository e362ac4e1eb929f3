"""Approving in a terminal: a y/N question that never takes a line meant for the agent.

A call that waits for an approval prints its arguments and the question once. The next
line that is only `y`/`yes` approves the oldest waiting call and `n`/`no` denies it; any
other line goes to the agent as usual, so typing on while a call waits loses nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.calls.registry import CallRegistry
from bot.calls.summary import arguments_text, call_label
from bot.toolcall import ToolCall

YES = frozenset({"y", "yes"})
NO = frozenset({"n", "no"})
CONSOLE_APPROVER = "console"


class ConsoleApprovals:
    def __init__(self, say: Callable[[str], None]) -> None:
        self._say = say
        self._waiting: dict[str, ToolCall] = {}

    def changed(self, call: ToolCall) -> None:
        if call.awaiting_approval and call.id not in self._waiting:
            self._waiting[call.id] = call
            shown = "\n".join(f"    {line}" for line in arguments_text(call).splitlines() or [""])
            self._say(f"✋ {call_label(call)} waits for your approval; it will run with:\n{shown}")
            self._say("   approve? y/N (a line of only y or n answers; anything else goes to the agent)")
        elif not call.awaiting_approval:
            self._waiting.pop(call.id, None)

    def answer(self, line: str, registry: CallRegistry) -> bool:
        """Whether the line was an answer (and so is not a message for the agent)."""
        word = line.strip().lower()
        if not self._waiting or word not in YES | NO:
            return False
        call_id = next(iter(self._waiting))
        self._waiting.pop(call_id)
        registry.decide(call_id, approve=word in YES, by=CONSOLE_APPROVER)
        return True
