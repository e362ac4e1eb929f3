"""The interactive console's output, in-process: rows fitted to the width, streamed answers, pending shown truly."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial

import pytest
from conftest import CoreFactory
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use
from prompt_toolkit.utils import get_cwidth

from bot.agent.engine import Delivery
from bot.clock import utcnow
from bot.console.fit import break_row, fit
from bot.console.screen import TerminalOutput
from bot.console.terminal import waits_for_slot
from bot.toolcall import CallStatus, ProgressKind, ToolCall
from bot.types import TurnOutcome


@pytest.mark.parametrize(
    ("text", "columns", "shown"),
    [
        ("short", 80, "short"),
        ("x" * 79, 80, "x" * 79),
        ("x" * 80, 80, "x" * 78 + "…"),
        ("⏳ " + "y" * 80, 40, "⏳ " + "y" * 35 + "…"),  # the emoji takes two columns
        ("⏳⏳⏳", 4, "⏳…"),
        ("⏸️ pending", 80, "⏸ pending"),  # prompt_toolkit gives the emoji form one column: the text form it is
    ],
)
def test_fit_cuts_to_one_row_with_the_last_column_free(text: str, columns: int, shown: str) -> None:
    assert fit(text, columns) == shown
    assert get_cwidth(fit(text, columns)) <= columns - 1


@pytest.mark.parametrize(
    ("text", "columns", "split"),
    [
        ("fits on a row", 80, None),
        ("the quick brown fox", 12, ("the quick", "brown fox")),
        ("abcdefghijklmnop", 8, ("abcdefg", "hijklmnop")),  # no space: a hard cut
        ("wide ⏳⏳⏳⏳ end", 10, ("wide", "⏳⏳⏳⏳ end")),
        ("⏸️⏸️⏸️⏸️", 8, ("⏸️⏸️⏸️", "⏸️")),  # two columns each on screen, and never split from the selector
    ],
)
def test_break_row_splits_at_the_last_space_that_fits(text: str, columns: int, split: tuple[str, str] | None) -> None:
    assert break_row(text, columns) == split


class Screen:
    """A TerminalOutput with what it printed and the live rows at each refresh."""

    def __init__(self, columns: int = 40) -> None:
        self.printed: list[str] = []
        self.live: list[list[str]] = []
        self.output = TerminalOutput(print_line=self.printed.append, refresh=self._refreshed, columns=lambda: columns)
        self.waits: Callable[[ToolCall], bool] = lambda call: True
        """What the terminal's prompt draws with: the core's caps, once a test opens one."""

    def _refreshed(self) -> None:
        self.live.append(self.output.live_rows(self.waits))


def test_a_streamed_answer_prints_whole_rows_and_keeps_the_rest_live() -> None:
    screen = Screen(columns=30)
    for delta in ("Hello the", "re, this is a long answer", " that wraps\nSecond", " line"):
        screen.output.text_delta("console:t", delta)
    assert screen.printed == ["assistant: Hello there, this", "is a long answer that wraps"]
    assert screen.output.live_rows() == ["Second line"]
    screen.output.text_done("console:t")
    assert screen.printed[-1] == "Second line"
    assert screen.output.live_rows() == []
    assert all(get_cwidth(row) < 30 for row in screen.printed)


def test_a_mid_turn_line_is_echoed_with_the_acknowledgement() -> None:
    screen = Screen()
    screen.output.said("first", Delivery.STARTED)
    screen.output.said("steer", Delivery.INJECTED)
    screen.output.said("late", Delivery.REFUSED)
    assert screen.printed == ["you: first", "you: steer  👀", "you: late  (not sent: the console is shutting down)"]


def test_the_indicator_shows_while_the_model_works_and_until_the_turn_ends() -> None:
    seconds: list[float | None] = [None]
    output = TerminalOutput(print_line=print, refresh=lambda: None, columns=lambda: 80, thinking_s=lambda: seconds[0])
    assert output.live_rows() == []
    output.turn_started("console:t")
    assert output.live_rows() == ["✳ working…"]
    seconds[0] = 2.2
    assert output.live_rows() == ["✳ thinking… 2s"]
    seconds[0] = None
    output.turn_finished(TurnOutcome("console:t"))
    assert output.live_rows() == []


async def test_pending_shows_only_for_a_call_that_waits_for_a_slot(
    fake: FakeAnthropic, core_factory: CoreFactory
) -> None:
    screen = Screen(columns=200)
    core = await core_factory(output=screen.output, bot_max_concurrent_io_tools=1)
    screen.waits = partial(waits_for_slot, core)
    fake.script(
        Reply.tools(tool_use("sleep_for", {"seconds": 0.3}), tool_use("sleep_for", {"seconds": 0.2})),
        Reply.text_only("Both slept."),
    )
    outcome = await core.engine.run_turn("console:t", "sleep twice")
    assert outcome is not None and outcome.error is None
    shown = [row for rows in screen.live for row in rows]
    first, second = "sleep_for(seconds=0.3)", "sleep_for(seconds=0.2)"
    # The first call takes the only slot: it is starting, never "pending", before it runs.
    assert not any(f"{first} pending" in row for row in shown)
    assert any(f"⏳ {first} starting" in row or f"⏳ {first} running" in row for row in shown)
    # The second one really waits for that slot, and says so.
    assert any(f"⏸ {second} pending (waiting for a free slot)" in row for row in shown)
    done = [line.split(" in ")[0] for line in screen.printed if line.startswith("✅")]
    assert done == [f"✅ {first} — done", f"✅ {second} — done"]


def test_a_call_failed_at_submit_is_printed_once() -> None:
    screen = Screen()
    call = ToolCall("toolu_1", "console:t", "turn", "nope", {})
    call.transition(CallStatus.FAILED)
    call.error = "unknown tool 'nope'"
    screen.output.call_changed(call)
    screen.output.calls_started("console:t", [call])
    assert screen.printed == ["❌ nope() — failed: unknown tool 'nope'"]


def test_the_running_time_agrees_with_the_progress_the_tool_counted() -> None:
    """4.6 s after the start, a sleep that reported its fourth second is "running 4s", never "running 5s"."""
    screen = Screen(columns=200)
    call = ToolCall("toolu_1", "console:t", "turn", "sleep_for", {"seconds": 12})
    call.transition(CallStatus.RUNNING)
    call.started_at = utcnow() - timedelta(seconds=4.6)
    call.add_progress(ProgressKind.PARTIAL, {"slept_s": 4.0, "total_s": 12, "message": "slept 4s of 12s"})
    screen.output.call_changed(call)
    assert screen.output.live_rows() == ["⏳ sleep_for(seconds=12) running 4s · slept 4s of 12s"]
