"""`python -m bot console` on a terminal: run under a pseudo-terminal of 80×24, keys typed, the screen read.

What a person sees is the screen, so the assertions are on the rows a terminal emulator (pyte) shows,
never on timing: every wait is for a screen condition, with a timeout.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use, user_texts
from fakes.terminal import FakeTerminal
from test_console import START_S, bot_env

from bot.console import typed
from bot.console.terminal import BANNER, FINISHING

PROMPT = "you:"
pytestmark = pytest.mark.timeout(150)


@pytest.fixture
async def terminal() -> AsyncIterator[FakeTerminal]:
    term = FakeTerminal(columns=80, lines=24)
    try:
        yield term
    finally:
        await term.close()


async def start_console(terminal: FakeTerminal, fake: FakeAnthropic, tmp_path: Path, **env: str) -> None:
    await terminal.start(sys.executable, "-m", "bot", "console", env=bot_env(fake, tmp_path, **env), cwd=tmp_path)
    await terminal.wait_for(lambda rows: terminal.cursor_row().startswith(PROMPT), "the prompt", START_S)


def has_row(text: str) -> object:
    return lambda rows: any(text in row for row in rows)


def at_idle_prompt(terminal: FakeTerminal) -> Callable[[list[str]], bool]:
    """The prompt with no live row over it: no turn runs and no call, so the next line starts a turn."""
    return lambda rows: (
        terminal.cursor_row() == PROMPT and not any(mark in row for row in rows for mark in ("✳", "⏳", "⏸"))
    )


def rows_with(rows: list[str], text: str) -> list[str]:
    return [row for row in rows if text in row]


async def test_the_banner_is_the_first_line_and_no_log_line_shows(
    terminal: FakeTerminal, fake: FakeAnthropic, tmp_path: Path
) -> None:
    await start_console(terminal, fake, tmp_path)
    rows = terminal.rows()
    assert rows[0] == BANNER
    assert rows[1] == PROMPT
    assert not any(row.strip() for row in rows[2:]), rows
    # The scheduler logs its start at INFO; in a chat that is noise, and it used to greet the user.
    assert b"scheduler started" not in terminal.transcript


async def test_text_typed_mid_turn_is_kept_acknowledged_and_injected(
    terminal: FakeTerminal, fake: FakeAnthropic, tmp_path: Path
) -> None:
    thinking = asyncio.Event()
    fake.script(
        Reply.tools(tool_use("sleep_for", {"seconds": 30}), text="Sleeping."),
        Reply.text_only("Skipping the sleep.", hold=thinking),
        Reply.text_only("Noted the cancelled sleep."),
    )
    await start_console(terminal, fake, tmp_path)
    terminal.type("sleep for thirty seconds\r")
    await terminal.wait_for(has_row("slept 1s of 30s"), "the sleep running")
    terminal.type("actually skip")
    # Two more progress repaints of the status row while the text sits in the input line.
    await terminal.wait_for(has_row("slept 3s of 30s"), "the status repainted")
    rows = terminal.rows()
    assert terminal.cursor_row() == f"{PROMPT} actually skip"
    assert len(rows_with(rows, "⏳ sleep_for")) == 1

    terminal.type(" the sleep\r")
    rows = await terminal.wait_for(has_row("you: actually skip the sleep  👀"), "the acknowledgement")
    requests = await fake.wait_for_requests(2)
    assert "[mid-turn user note] " + typed("actually skip the sleep") in user_texts(requests[1])
    # The model works on the note (its answer held mid-stream): the console says so.
    await terminal.wait_for(has_row("✳ thinking…"), "the thinking indicator")
    assert terminal.cursor_row() == PROMPT
    thinking.set()
    await terminal.wait_for(has_row("assistant: Skipping the sleep."), "the answer")
    await terminal.wait_for(lambda rows: not rows_with(rows, "✳"), "the turn over")

    terminal.type("\x03")  # Ctrl-C: the sleep still runs in the background, so this cancels it
    await terminal.wait_for(has_row("🚫 sleep_for(seconds=30) — cancelled by you (Ctrl-C)"), "the cancelled sleep")
    await terminal.wait_for(has_row("assistant: Noted the cancelled sleep."), "the background turn")
    await terminal.wait_for(at_idle_prompt(terminal), "the prompt with no turn running")
    terminal.type("\x04")  # Ctrl-D at the idle prompt leaves
    assert await terminal.wait_exit() == 0
    assert fake.rejections == []


async def test_status_at_80_columns_fits_one_row_and_leaves_no_stale_rows(
    terminal: FakeTerminal, fake: FakeAnthropic, tmp_path: Path
) -> None:
    fake.script(
        Reply.tools(tool_use("sleep_for", {"seconds": 2}), tool_use("sleep_for", {"seconds": 3}), text="Sleeping."),
        Reply.text_only("Both done."),
    )
    most_status_rows = 0
    status_rows_seen: set[str] = set()

    def count(rows: list[str]) -> None:
        nonlocal most_status_rows
        status = rows_with(rows, "⏳")
        most_status_rows = max(most_status_rows, len(status))
        status_rows_seen.update(status)

    terminal.watch(count)
    await start_console(terminal, fake, tmp_path)
    terminal.type("sleep twice\r")
    rows = await terminal.wait_for(has_row("assistant: Both done."), "the answer")
    assert most_status_rows == 1, "every repaint must replace the one status row"
    assert any(row.endswith("…") for row in status_rows_seen), "two calls do not fit 80 columns: cut, not wrapped"
    assert rows_with(rows, "⏳") == []
    assert len(rows_with(rows, "✅ sleep_for(seconds=2) — done")) == 1
    assert len(rows_with(rows, "✅ sleep_for(seconds=3) — done")) == 1
    assert not any("pending" in row or "⏸" in row for row in status_rows_seen), "slots were free"
    await terminal.wait_for(lambda rows: terminal.cursor_row() == PROMPT, "the prompt back")


async def test_the_prompt_returns_after_a_background_turn_and_a_reminder(
    terminal: FakeTerminal, fake: FakeAnthropic, tmp_path: Path
) -> None:
    fake.script(
        Reply.tools(
            tool_use("sleep_for", {"seconds": 1}),
            tool_use("schedule_reminder", {"text": "stretch your legs", "in_seconds": 1}),
            text="Working.",
        ),
        Reply.text_only("The reminder is set; the sleep still runs."),
        Reply.text_only("The sleep finished."),
        Reply.text_only("Hello back."),
    )
    await start_console(terminal, fake, tmp_path, BOT_YIELD_STRATEGY="on_any_progress")
    terminal.type("sleep and remind me\r")
    await terminal.wait_for(has_row("assistant: The sleep finished."), "the background turn")
    await terminal.wait_for(has_row("⏰ stretch your legs"), "the reminder")
    # The prompt is always there; with no live row over it, no turn runs: the next line starts one.
    await terminal.wait_for(at_idle_prompt(terminal), "the prompt with no turn running")

    terminal.type("hello\r")
    rows = await terminal.wait_for(has_row("assistant: Hello back."), "the answer to the next line")
    assert "you: hello" in rows and not rows_with(rows, "you: hello  👀"), "a new turn, not a note"
    requests = await fake.wait_for_requests(4)
    assert user_texts(requests[3])[-1] == typed("hello")
    assert fake.rejections == []


async def test_after_ctrl_d_the_running_call_stays_on_screen_and_ctrl_c_still_cancels_it(
    terminal: FakeTerminal, fake: FakeAnthropic, tmp_path: Path
) -> None:
    fake.script(Reply.tools(tool_use("sleep_for", {"seconds": 30}), text="Sleeping."), Reply.text_only("Stopped."))
    await start_console(terminal, fake, tmp_path)
    terminal.type("sleep for thirty seconds\r")
    await terminal.wait_for(has_row("slept 1s of 30s"), "the sleep running")
    terminal.type("\x04")  # Ctrl-D: leave once the turn is over
    await terminal.wait_for(has_row(FINISHING), "the hint")
    # The progress row is still drawn and still repainted while the turn finishes.
    rows = await terminal.wait_for(
        lambda rows: any(FINISHING in row for row in rows) and any("slept 3s of 30s" in row for row in rows),
        "the sleep's progress under the hint",
    )
    assert len(rows_with(rows, "⏳ sleep_for")) == 1
    assert PROMPT not in rows, "no prompt: nothing typed now would be sent"
    terminal.type("\x03")
    await terminal.wait_for(has_row("🚫 sleep_for(seconds=30) — cancelled by you (Ctrl-C)"), "the cancelled sleep")
    assert await terminal.wait_exit() == 0
    rows = terminal.rows()
    assert rows_with(rows, "assistant: Stopped.") and not rows_with(rows, "⏳"), rows
