"""The daemon's agent surface over Socket Mode: App Home with live calls and its Cancel, prompts and titles in DMs."""

from __future__ import annotations

from typing import Any

import pytest
from daemon_rig import WAIT_S, World, mention, wait_status, wait_text
from fakes.anthropic_api import Reply, tool_use

from bot.config import DEFAULT_SUGGESTED_PROMPTS
from bot.slack.home_view import CANCEL_REMINDER_ACTION
from bot.slack.render import CANCEL_ACTION

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio(loop_scope="module")]


def _cancels(view: dict[str, Any] | None) -> list[str]:
    return [
        block["accessory"]["value"]
        for block in (view or {}).get("blocks", [])
        if (block.get("accessory") or {}).get("action_id") == CANCEL_ACTION
    ]


async def test_the_home_shows_a_running_call_and_only_its_requester_cancels_it(world: World) -> None:
    slack, channel = world.slack, world.channel
    long = tool_use("sleep_for", {"seconds": 60})
    world.script.add("home sleep", Reply.tools(long), Reply.text_only("Stopped early."))
    event = await mention(slack, channel, "home sleep")
    status = await wait_status(slack, channel, event["ts"])
    await slack.send_event(slack.agent.app_home_opened("U1"))
    await slack.send_event(slack.agent.app_home_opened("U2"))
    await slack.wait_for(lambda: _cancels(slack.agent.home_of("U1")) == [long["id"]], WAIT_S, "U1's home with the call")
    await slack.wait_for(lambda: slack.agent.home_of("U2") is not None, WAIT_S, "U2's home")
    mine = str(slack.agent.home_of("U1"))
    assert "sleep_for" in mine and f"archives/{channel}/p{event['ts'].replace('.', '')}" in mine
    assert not _cancels(slack.agent.home_of("U2")), "U2 sees none of U1's calls"

    seen = len(slack.agent.homes["U2"].history)
    forged = slack.agent.home_action("U2", CANCEL_ACTION, long["id"], view_of="U1")
    await slack.wait_ack(await slack.send_interactive(forged))
    await slack.wait_for(lambda: len(slack.agent.homes["U2"].history) > seen, WAIT_S, "U2's home after the click")
    assert "cancelled" not in status.text, "a click by someone else is refused"

    await slack.wait_ack(await slack.send_interactive(slack.agent.home_action("U1", CANCEL_ACTION, long["id"])))
    await slack.wait_for(lambda: "cancelled by <@U1>" in status.text, WAIT_S, "the call cancelled by U1")
    await slack.wait_for(lambda: not _cancels(slack.agent.home_of("U1")), WAIT_S, "U1's home without the call")


async def test_a_dm_is_offered_the_prompts_and_its_thread_gets_a_title(world: World) -> None:
    slack = world.slack
    await slack.send_event(slack.agent.app_home_opened("U1", tab="messages", channel="DHOME"))
    await slack.wait_for(
        lambda: [o for o in slack.agent.prompt_offers if o.channel == "DHOME"], WAIT_S, "prompts in the DM"
    )
    [offer] = [o for o in slack.agent.prompt_offers if o.channel == "DHOME"]
    assert offer.thread_ts is None
    assert [p["title"] for p in offer.prompts] == [p.title for p in DEFAULT_SUGGESTED_PROMPTS]
    root = slack.user_message("DHOME", "Remind me in 10 minutes to stretch.")
    await slack.send_event(root)
    await slack.wait_for(lambda: slack.agent.titles.get(("DHOME", root["ts"])), WAIT_S, "the thread's title")
    assert slack.agent.titles[("DHOME", root["ts"])] == "Remind me in 10 minutes to stretch."


async def test_a_reminder_set_in_a_thread_is_cancelled_from_the_home(world: World) -> None:
    slack, channel = world.slack, world.channel
    ask = tool_use("schedule_reminder", {"text": "water the plants", "in_seconds": 3600})
    world.script.add("remind home", Reply.tools(ask), Reply.text_only("Reminder set."))
    event = await mention(slack, channel, "remind home", user="U3")
    await wait_text(slack, channel, event["ts"], "Reminder set.")
    await slack.send_event(slack.agent.app_home_opened("U3"))
    await slack.wait_for(lambda: _reminders(slack.agent.home_of("U3")), WAIT_S, "U3's home with the reminder")
    [reminder_id] = _reminders(slack.agent.home_of("U3"))
    assert "water the plants" in str(slack.agent.home_of("U3"))
    await slack.send_event(slack.agent.app_home_opened("U2"))
    await slack.wait_for(lambda: slack.agent.home_of("U2") is not None, WAIT_S, "U2's home")
    seen = len(slack.agent.homes["U2"].history)
    forged = slack.agent.home_action("U2", CANCEL_REMINDER_ACTION, reminder_id, view_of="U3")
    await slack.wait_ack(await slack.send_interactive(forged))
    await slack.wait_for(lambda: len(slack.agent.homes["U2"].history) > seen, WAIT_S, "U2's home after the click")
    seen = len(slack.agent.homes["U3"].history)
    await slack.send_event(slack.agent.app_home_opened("U3"))  # looks again
    await slack.wait_for(lambda: len(slack.agent.homes["U3"].history) > seen, WAIT_S, "U3's home again")
    assert _reminders(slack.agent.home_of("U3")) == [reminder_id], "someone else's click is refused"
    await slack.wait_ack(
        await slack.send_interactive(slack.agent.home_action("U3", CANCEL_REMINDER_ACTION, reminder_id))
    )
    await slack.wait_for(lambda: not _reminders(slack.agent.home_of("U3")), WAIT_S, "U3's home without it")


async def test_an_assistant_thread_is_offered_the_prompts_in_it(world: World) -> None:
    slack = world.slack
    slack.agent.agent_app = False
    try:
        event = slack.agent.assistant_thread_started("U1", channel="DASSIST")
        await slack.send_event(event)
        offers = await slack.wait_for(
            lambda: [o for o in slack.agent.prompt_offers if o.channel == "DASSIST"], WAIT_S, "prompts in the thread"
        )
    finally:
        slack.agent.agent_app = True
    assert offers[0].thread_ts == event["assistant_thread"]["thread_ts"]


def _reminders(view: dict[str, Any] | None) -> list[str]:
    return [
        block["accessory"]["value"]
        for block in (view or {}).get("blocks", [])
        if (block.get("accessory") or {}).get("action_id") == CANCEL_REMINDER_ACTION
    ]
