"""`ask_user` in Slack, against the daemon as a process: the question in the thread with its options as buttons,
or answered by the requester's next reply; another person's click is refused privately and loses nothing; the
answer reaches the model as a late result; a question outlives a kill -9, its old buttons still work, and
nobody answering in time is a clear result.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from daemon_rig import WAIT_S, World, mention, reply, status_posts, wait_text
from fakes.anthropic_api import Reply, tool_use
from fakes.slack_api import StoredMessage
from test_crash import kill, restart
from test_e2e_approvals import buttons, shown_in_store

from bot.slack.approvals import NOT_YOURS_TO_ANSWER
from bot.slack.render import ANSWER_ACTION, CANCEL_ACTION

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]


async def asked(world: World, channel: str, thread_ts: str) -> StoredMessage:
    """The status message once it shows the question with its buttons."""

    def check() -> StoredMessage | None:
        found = status_posts(world.slack, channel, thread_ts)
        return found[0] if found and CANCEL_ACTION in buttons(found[0].blocks) else None

    return await world.slack.wait_for(check, WAIT_S, "the question")


def late_note(world: World, prefix: str, call_id: str) -> str:
    """The late note that delivered the call's outcome to the model."""
    needle = f"(tool_call_id {call_id}) finished"
    notes = [json.dumps(r["messages"][-1]) for r in world.requests(prefix) if needle in json.dumps(r["messages"][-1])]
    assert notes, f"no late result for {call_id}"
    return notes[0]


async def wait_note(world: World, prefix: str, call_id: str) -> str:
    needle = f"(tool_call_id {call_id}) finished"
    await world.slack.wait_for(
        lambda: any(needle in json.dumps(r["messages"][-1]) for r in world.requests(prefix)), WAIT_S, "the late result"
    )
    return late_note(world, prefix, call_id)


def answer_click(world: World, message: StoredMessage, index: int, call_id: str, user: str) -> dict[str, Any]:
    return world.slack.block_action(message.channel, message.ts, f"{ANSWER_ACTION}:{index}", call_id, user=user)


async def test_options_are_buttons_and_only_the_requester_answers(world: World) -> None:
    slack, channel = world.slack, world.channel
    ask = tool_use("ask_user", {"question": "Which colour, <!here>?", "options": ["red", "blue"]})
    world.script.add("paint the shed", Reply.tools(ask), Reply.text_only("I asked."), Reply.text_only("Blue it is."))
    event = await mention(slack, channel, "paint the shed")
    status = await asked(world, channel, event["ts"])
    await wait_text(slack, channel, event["ts"], "I asked.")  # the turn went on without the answer
    assert buttons(status.blocks) == [f"{ANSWER_ACTION}:0", f"{ANSWER_ACTION}:1", CANCEL_ACTION]
    shown = json.dumps(status.blocks)
    assert "<@U1>, *a question for you:*\\nWhich colour, &lt;!here&gt;?" in shown and "<!here>" not in shown
    assert "waiting for an answer from <@U1>" in status.text

    stranger = answer_click(world, status, 0, ask["id"], "U2")
    await slack.wait_ack(await slack.send_interactive(stranger))
    await slack.wait_for(
        lambda: any(e.text == NOT_YOURS_TO_ANSWER and e.user == "U2" for e in slack.ephemerals), WAIT_S, "not yours"
    )
    assert "waiting for an answer" in status.text, "another person's click answers nothing"

    click = answer_click(world, status, 1, ask["id"], "U1")
    await slack.wait_ack(await slack.send_interactive(click))
    await wait_text(slack, channel, event["ts"], "Blue it is.")
    note = late_note(world, "paint the shed", ask["id"])
    assert '\\"answer\\": \\"blue\\", \\"answered_by\\": \\"U1\\"' in note and "untrusted" in note
    await slack.wait_for(lambda: "answered by <@U1>: blue" in status.text, WAIT_S, "the line says who answered")
    assert buttons(status.blocks) == [], "no buttons once answered"


async def test_the_requesters_next_reply_answers_a_free_text_question(world: World) -> None:
    slack, channel = world.slack, world.channel
    ask = tool_use("ask_user", {"question": "Which branch?"})
    world.script.add(
        "deploy please",
        Reply.tools(ask),
        Reply.text_only("Asked."),
        Reply.text_only("Heard U2."),
        Reply.text_only("Deploying."),
    )
    event = await mention(slack, channel, "deploy please")
    await asked(world, channel, event["ts"])
    await wait_text(slack, channel, event["ts"], "Asked.")
    other = await reply(slack, channel, event["ts"], "I think it is dev", user="U2")  # not theirs: a message as usual
    await wait_text(slack, channel, event["ts"], "Heard U2.")
    answer = await reply(slack, channel, event["ts"], "release-7", user="U1")
    await wait_text(slack, channel, event["ts"], "Deploying.")
    note = late_note(world, "deploy please", ask["id"])
    assert '\\"answer\\": \\"release-7\\"' in note
    said = [json.dumps(r["messages"]) for r in world.requests("deploy please")]
    assert any("I think it is dev" in text for text in said), "the other person's reply reached the agent"
    assert not any('<message from=\\"U1\\"' in text and "release-7</message>" in text for text in said), (
        "the answer came as the call's result, not as a message"
    )
    assert "white_check_mark" in slack.reactions_on(channel, answer["ts"])
    assert "white_check_mark" not in slack.reactions_on(channel, other["ts"])


async def test_stop_the_cancel_button_or_a_reaction_withdraws_a_question(world: World) -> None:
    slack, channel = world.slack, world.channel
    ask = tool_use("ask_user", {"question": "Shall I?"})
    world.script.add("maybe later", Reply.tools(ask), Reply.text_only("Asked."), Reply.text_only("Withdrawn."))
    event = await mention(slack, channel, "maybe later")
    status = await asked(world, channel, event["ts"])
    await wait_text(slack, channel, event["ts"], "Asked.")
    await reply(slack, channel, event["ts"], "stop", user="U1")
    await slack.wait_for(lambda: "cancelled by <@U1>" in status.text, WAIT_S, "the question cancelled")
    assert "cancelled by U1" in await wait_note(world, "maybe later", ask["id"])

    pick = tool_use("ask_user", {"question": "Tea or coffee?", "options": ["tea", "coffee"]})
    world.script.add("a drink", Reply.tools(pick), Reply.text_only("Asked."), Reply.text_only("No drink then."))
    event = await mention(slack, channel, "a drink")
    status = await asked(world, channel, event["ts"])
    await wait_text(slack, channel, event["ts"], "Asked.")  # the turn ended: the cancel comes as a late result
    click = slack.block_action(channel, status.ts, CANCEL_ACTION, pick["id"], user="U1")
    await slack.wait_ack(await slack.send_interactive(click))
    await slack.wait_for(lambda: "cancelled by <@U1>" in status.text, WAIT_S, "the question cancelled")
    assert "cancelled by U1" in await wait_note(world, "a drink", pick["id"])

    react = tool_use("ask_user", {"question": "Lunch?"})
    world.script.add("lunch plans", Reply.tools(react), Reply.text_only("Asked."), Reply.text_only("No lunch."))
    event = await mention(slack, channel, "lunch plans")
    status = await asked(world, channel, event["ts"])
    await wait_text(slack, channel, event["ts"], "Asked.")
    await slack.send_event(slack.reaction_added("U1", "x", channel, status.ts))
    await slack.wait_for(lambda: "cancelled by <@U1>" in status.text, WAIT_S, "the question cancelled")
    assert "cancelled by U1" in await wait_note(world, "lunch plans", react["id"])


async def test_nobody_answering_in_time_is_a_clear_result(world: World) -> None:
    slack, channel = world.slack, world.channel
    ask = tool_use("ask_user", {"question": "Anyone?", "timeout_seconds": 1})
    world.script.add("ask and wait", Reply.tools(ask), Reply.text_only("Asked."), Reply.text_only("Nobody."))
    event = await mention(slack, channel, "ask and wait")
    status = await asked(world, channel, event["ts"])
    await wait_text(slack, channel, event["ts"], "Nobody.")
    assert "nobody answered the question within 1s" in late_note(world, "ask and wait", ask["id"])
    await slack.wait_for(lambda: "nobody answered in time" in status.text, WAIT_S, "the line says so")


async def test_a_question_outlives_a_kill_and_its_buttons_and_replies_still_work(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    await daemon.start()
    await daemon.connected()
    pick = tool_use("ask_user", {"question": "Ship it?", "options": ["yes", "no"]})
    free = tool_use("ask_user", {"question": "Release notes?"})
    own.script.add("ship", Reply.tools(pick, free), Reply.text_only("Asked both."))
    event = await mention(slack, "C1", "ship")
    status = await asked(own, "C1", event["ts"])
    await wait_text(slack, "C1", event["ts"], "Asked both.")
    await shown_in_store(daemon.data_dir / "bot.db", pick["id"])  # how the next process finds the message
    await kill(daemon)
    await restart(daemon)
    own.script.add("ship", Reply.text_only("Shipping."), Reply.text_only("Notes taken."))

    stranger = answer_click(own, status, 0, pick["id"], "U2")
    await slack.wait_ack(await slack.send_interactive(stranger))
    await slack.wait_for(lambda: any(e.text == NOT_YOURS_TO_ANSWER for e in slack.ephemerals), WAIT_S, "not yours")
    click = answer_click(own, status, 0, pick["id"], "U1")
    await slack.wait_ack(await slack.send_interactive(click))
    assert '\\"answer\\": \\"yes\\"' in await wait_note(own, "ship", pick["id"])
    await slack.wait_for(lambda: "answered by <@U1>: yes" in status.text, WAIT_S, "the old message repainted")

    await reply(slack, "C1", event["ts"], "fixes the login bug", user="U1")
    assert '\\"answer\\": \\"fixes the login bug\\"' in await wait_note(own, "ship", free["id"])


async def test_the_policys_approvers_may_answer_too(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    policy = daemon.data_dir.parent / "policy.toml"
    policy.write_text('[default]\napprovers = ["ULEAD"]\n', encoding="utf-8")
    daemon.env = {"BOT_POLICY_FILE": str(policy)}
    await daemon.start()
    await daemon.connected()
    ask = tool_use("ask_user", {"question": "Friday deploy?", "options": ["go", "wait"]})
    own.script.add("deploy friday", Reply.tools(ask), Reply.text_only("Asked."), Reply.text_only("Waiting then."))
    event = await mention(slack, "C1", "deploy friday")
    status = await asked(own, "C1", event["ts"])
    assert "waiting for an answer from <@U1> or <@ULEAD>" in status.text
    await wait_text(slack, "C1", event["ts"], "Asked.")
    click = answer_click(own, status, 1, ask["id"], "ULEAD")
    await slack.wait_ack(await slack.send_interactive(click))
    assert '\\"answer\\": \\"wait\\", \\"answered_by\\": \\"ULEAD\\"' in await wait_note(
        own, "deploy friday", ask["id"]
    )


async def test_two_open_questions_take_the_replies_oldest_first(world: World) -> None:
    slack, channel = world.slack, world.channel
    first = tool_use("ask_user", {"question": "Your name?"})
    second = tool_use("ask_user", {"question": "Your team?"})
    world.script.add("sign me up", Reply.tools(first, second), Reply.text_only("Asked two."))
    event = await mention(slack, channel, "sign me up")
    await wait_text(slack, channel, event["ts"], "Asked two.")
    await reply(slack, channel, event["ts"], "Ada", user="U1")
    assert '\\"answer\\": \\"Ada\\"' in await wait_note(world, "sign me up", first["id"])
    await reply(slack, channel, event["ts"], "Platform", user="U1")
    assert '\\"answer\\": \\"Platform\\"' in await wait_note(world, "sign me up", second["id"])
