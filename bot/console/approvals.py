"""A person's word in a terminal: y/N for an approval, a prompt for a question; neither takes an agent's line.

A call that waits for an approval prints its arguments and the question once; the next line
that is only `y`/`yes` approves the oldest waiting call and `n`/`no` denies it. A question
(`ask_user`) prints itself once, with its options numbered: a line that is one of those
numbers, or an option's own text, answers it; without options the next line is the answer,
as a reply in a Slack thread is. Any other line goes to the agent as usual, so typing on while
a call waits loses nothing.
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
        self._questions: dict[str, ToolCall] = {}

    def changed(self, call: ToolCall) -> None:
        if call.awaiting_answer and call.id not in self._questions:
            self._questions[call.id] = call
            self._ask(call)
        elif call.awaiting_approval and call.id not in self._waiting:
            self._waiting[call.id] = call
            shown = "\n".join(f"    {line}" for line in arguments_text(call).splitlines() or [""])
            self._say(f"✋ {call_label(call)} waits for your approval; it will run with:\n{shown}")
            self._say("   approve? y/N (a line of only y or n answers; anything else goes to the agent)")
        elif not call.awaiting_person:
            self._waiting.pop(call.id, None)
            self._questions.pop(call.id, None)

    def _ask(self, call: ToolCall) -> None:
        self._say(f"❓ {call.input.get('question', '')}")
        options = call.options
        for number, option in enumerate(options, start=1):
            self._say(f"   {number}. {option}")
        if options:
            self._say("   (a line of only a number or an option answers; anything else goes to the agent)")
        else:
            self._say("   (your next line is the answer)")

    def answer(self, line: str, registry: CallRegistry) -> bool:
        """Whether the line was an answer (and so is not a message for the agent)."""
        return self._answer_question(line, registry) or self._decide(line, registry)

    def _decide(self, line: str, registry: CallRegistry) -> bool:
        word = line.strip().lower()
        if not self._waiting or word not in YES | NO:
            return False
        call_id = next(iter(self._waiting))
        self._waiting.pop(call_id)
        registry.decide(call_id, approve=word in YES, by=CONSOLE_APPROVER)
        return True

    def _answer_question(self, line: str, registry: CallRegistry) -> bool:
        """The oldest open question this line answers: a free-text one takes any line, one with options a choice."""
        text = line.strip()
        for call_id, call in self._questions.items():
            options = call.options
            chosen = _choice(text, options) if options else text
            if chosen:
                del self._questions[call_id]
                return registry.answer(call_id, chosen, by=CONSOLE_APPROVER)
        return False


def _choice(text: str, options: list[str]) -> str | None:
    if text.isdigit() and 1 <= int(text) <= len(options):
        return options[int(text) - 1]
    return next((option for option in options if option.casefold() == text.casefold()), None)
