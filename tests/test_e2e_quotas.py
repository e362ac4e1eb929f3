"""Quotas hit through the daemon as a process: the thread gets a clear line, the model a clear tool result."""

from __future__ import annotations

import pytest
from daemon_rig import World, mention, wait_text
from fakes.anthropic_api import Reply, tool_results, tool_use

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio(loop_scope="module")]


async def test_a_reminder_past_the_persons_limit_is_refused_in_the_thread(own: World) -> None:
    own.daemon.env = {"BOT_MAX_REMINDERS_PER_USER": "1"}
    await own.daemon.start()
    await own.daemon.connected()
    two = [tool_use("schedule_reminder", {"text": text, "in_seconds": 3600}) for text in ("first", "second")]
    own.script.add("two reminders", Reply.tools(*two), Reply.text_only("Only one was set."))
    event = await mention(own.slack, "C1", "two reminders")
    line = await wait_text(
        own.slack, "C1", event["ts"], "A reminder was refused: U1 already has 1 pending reminders and waits"
    )
    assert "BOT_MAX_REMINDERS_PER_USER (1)" in line.text
    await wait_text(own.slack, "C1", event["ts"], "Only one was set.")
    [_, second] = own.requests("two reminders")
    refused = [
        str(content) for content in tool_results(second).values() if "BOT_MAX_REMINDERS_PER_USER" in str(content)
    ]
    assert len(refused) == 1 and "cancel_reminder" in refused[0]


async def test_a_spent_token_budget_answers_with_a_line_and_no_model_call(own: World) -> None:
    own.daemon.env = {"BOT_DAILY_TOKENS_PER_USER": "1"}
    await own.daemon.start()
    await own.daemon.connected()
    first = await mention(own.slack, "C1", "first question")
    await wait_text(own.slack, "C1", first["ts"], "ok")
    asked = len(own.model.requests)
    second = await mention(own.slack, "C1", "second question")
    line = await wait_text(own.slack, "C1", second["ts"], "Not answered: U1 has used")
    assert "the daily budget BOT_DAILY_TOKENS_PER_USER (1) allows; it resets at 00:00 UTC" in line.text
    assert len(own.model.requests) == asked, "the model was not called"
