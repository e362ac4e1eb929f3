"""Ctrl-C in the console: the first press cancels the running calls, the next stops the whole turn.

A first press while the model works and no call runs stops nothing, and says so: the next one
stops the turn. Calls still running in the background after their turn ended count as running: Ctrl-C
cancels them rather than leaving. Shared by the piped chat (where Ctrl-C is SIGINT) and
the terminal (where it is a key), so both count presses and word the hint the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from bot.agent.engine import Engine
from bot.calls.registry import CallRegistry
from bot.concurrency import TaskSet

BY = "you (Ctrl-C)"


class Interrupts:
    def __init__(
        self,
        session_key: str,
        *,
        engine: Engine,
        registry: CallRegistry,
        say: Callable[[str], None],
        turns_ended: Callable[[], int] = lambda: 0,
    ) -> None:
        """`turns_ended` counts the turns finished so far (the terminal's output): a press after one ended
        counts from one again. The piped chat calls `reset` instead, at each line it sends."""
        self._key = session_key
        self._engine = engine
        self._registry = registry
        self._say = say
        self._turns_ended = turns_ended
        self._counted_in = turns_ended()
        self._presses = 0
        self._cancels = TaskSet()

    def reset(self) -> None:
        """The turn ended (or a new one began): the next press cancels calls again rather than a turn."""
        self._presses = 0

    def press(self) -> bool:
        """Cancel what runs; False when nothing runs (then Ctrl-C means "leave")."""
        engine = self._engine
        if (ended := self._turns_ended()) != self._counted_in:
            self._counted_in = ended
            self.reset()
        if engine.is_busy(self._key):
            self._presses += 1
            if self._presses > 1:
                cancel = engine.cancel_turn(self._key, by=BY)
            elif self._registry.open_calls(self._key):
                self._say("(cancelling running tool calls — Ctrl-C again stops the whole turn)")
                cancel = engine.cancel_calls(self._key, by=BY)
            else:  # the model is at work and no call runs: this press stops nothing, the next one the turn
                self._say("(no tool call is running — Ctrl-C again stops the whole turn)")
                return True
        elif self._registry.open_calls(self._key):
            self._say("(cancelling the tool calls still running in the background)")
            cancel = engine.cancel_calls(self._key, by=BY)
        else:
            return False
        self._cancels.spawn(cancel, "console-cancel")
        return True
