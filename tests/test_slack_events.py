"""Slack messages into the engine, in process: thread context, filtering, files, `stop`, refusals.

The router gets event bodies directly (bolt's part is covered end to end); the engine is real and talks
to the fake Messages API, the edge is real and talks to the fake Slack.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import CoreFactory
from fakes.anthropic_api import FakeAnthropic, Reply, tool_use, user_texts
from fakes.slack_api import FakeSlack, event_callback_body

from bot.agent.fence import untrusted
from bot.app import Core
from bot.slack import history
from bot.slack.client import SlackClient
from bot.slack.edits import EditScheduler
from bot.slack.events import DENIAL, MessageRouter
from bot.slack.output import SlackEdge
from bot.store import Store
from bot.telemetry.metrics import Metrics

WAIT_S = 20.0  # an upper bound: generous, so a loaded machine is slow, not failing


@dataclass
class Rig:
    slack: FakeSlack
    model: FakeAnthropic
    router: MessageRouter
    metrics: Metrics
    edits: EditScheduler
    core: Core
    client: SlackClient
    edge: SlackEdge

    async def send(self, event: dict[str, Any]) -> None:
        await self.router.handle(event_callback_body(event))

    async def wait_post(self, channel: str, thread_ts: str, needle: str) -> None:
        def found() -> bool:
            return any(needle in m.text for m in self.slack.posts_in_thread(channel, thread_ts))

        await self.slack.wait_for(found, WAIT_S, f"a post containing {needle!r}")


def _asker_zone(edges: list[SlackEdge]) -> Callable[[str], Awaitable[str | None]]:
    """The users.info zone lookup of the edge the factory builds on the core's store (as the daemon passes it)."""

    async def lookup(key: str) -> str | None:
        return await edges[0].sessions.user_timezone(key)

    return lookup


async def make_rig(slack: FakeSlack, fake: FakeAnthropic, core_factory: CoreFactory, **settings: Any) -> Rig:
    client = SlackClient(token="xoxb-test", base_url=slack.api_url)
    edits = EditScheduler(client, min_interval_s=0.01)
    await edits.start()
    edges: list[SlackEdge] = []

    def edge_on(store: Store) -> SlackEdge:
        edges.append(SlackEdge(client, edits, store=store, team_id="T1"))
        return edges[0]

    core = await core_factory(output=edge_on, open_kwargs={"user_timezone": _asker_zone(edges)}, **settings)
    [edge] = edges
    metrics = Metrics()
    router = MessageRouter(
        client=client,
        store=core.store,
        engine=core.engine,
        edge=edge,
        sessions=edge.sessions,
        settings=core.settings,
        bot_user_id="UBOT",
        metrics=metrics,
        coordination=core.coordination,
    )
    return Rig(slack, fake, router, metrics, edits, core, client, edge)


RigFactory = Callable[..., Awaitable[Rig]]


@pytest.fixture
async def rigs(slack: FakeSlack, fake: FakeAnthropic, core_factory: CoreFactory) -> AsyncIterator[RigFactory]:
    """Builds rigs on the given settings; closes their cores, then their edit schedulers."""
    made: list[Rig] = []

    async def make(**settings: Any) -> Rig:
        made.append(await make_rig(slack, fake, core_factory, **settings))
        return made[-1]

    try:
        yield make
    finally:
        await core_factory.close_all()
        for rig in made:
            await rig.edits.close(1.0)


@pytest.fixture
async def rig(rigs: RigFactory) -> Rig:
    return await rigs()


async def test_first_mention_inside_a_thread_brings_the_thread_as_context(rig: Rig) -> None:
    slack = rig.slack
    root = slack.user_message("C1", "the deploy failed at step 3", user="U2")
    reply = slack.user_message("C1", "logs say disk full", user="U3", thread_ts=root["ts"])
    mention = slack.mention("C1", "what should we do?", thread_ts=root["ts"])
    await rig.send(mention)
    await rig.wait_post("C1", root["ts"], "ok")
    [first] = user_texts(rig.model.requests[0])
    assert first == (
        "[Earlier messages in this Slack thread, for context]\n"
        '<untrusted source="history">\n'
        f'<message from="U2" name="user_u2" ts="{root["ts"]}">the deploy failed at step 3</message>\n'
        f'<message from="U3" name="user_u3" ts="{reply["ts"]}">logs say disk full</message>\n'
        "</untrusted>\n\n"
        "[The message addressed to you]\n"
        f'<message from="U1" name="user_u1" ts="{mention["ts"]}">what should we do?</message>'
    )


async def test_a_thread_slack_does_not_answer_for_is_answered_without_its_context(rig: Rig) -> None:
    slack = rig.slack
    root = slack.user_message("C1", "the deploy failed at step 3", user="U2")
    rig.client.timeout = 0.5
    slack.stall("conversations.replies")
    mention = slack.mention("C1", "what should we do?", thread_ts=root["ts"])
    await rig.send(mention)
    await rig.wait_post("C1", root["ts"], "ok")
    said = f'<message from="U1" name="user_u1" ts="{mention["ts"]}">what should we do?</message>'
    assert user_texts(rig.model.requests[0]) == [said]


async def test_edits_bots_joins_and_chatter_never_reach_the_model(rig: Rig) -> None:
    slack = rig.slack
    root = slack.mention("C1", "start")
    await rig.send(root)
    await rig.wait_post("C1", root["ts"], "ok")
    thread = root["ts"]
    await rig.send({**slack.user_message("C1", "x", thread_ts=thread), "subtype": "message_changed"})
    await rig.send({**slack.user_message("C1", "x", thread_ts=thread), "bot_id": "B9", "user": "U9"})
    await rig.send({**slack.user_message("C1", "joined"), "subtype": "channel_join"})
    await rig.send(slack.user_message("C1", "lunch?"))
    await rig.send(slack.user_message("C1", "reply to lunch", thread_ts=slack.user_message("C1", "lunch")["ts"]))
    assert len(rig.model.requests) == 1
    assert rig.metrics.counts["events_ignored_total"] == 5


async def test_a_file_share_reaches_the_model_with_its_contents(rig: Rig) -> None:
    slack = rig.slack
    csv = slack.files.share("data.csv", "a,b\n1,2\n", "text/csv")
    event = slack.files.attach(slack.user_message("D1", "what is in this?"), csv)
    await rig.send(event)
    await rig.wait_post("D1", event["ts"], "ok")
    said = f'<message from="U1" name="user_u1" ts="{event["ts"]}">what is in this?</message>'
    assert user_texts(rig.model.requests[0]) == [said, untrusted("file", "a,b\n1,2\n", name="data.csv")]


async def test_stop_with_nothing_running_says_so(rig: Rig) -> None:
    slack = rig.slack
    root = slack.mention("C1", "hello")
    await rig.send(root)
    await rig.wait_post("C1", root["ts"], "ok")
    await rig.send(slack.user_message("C1", "stop", thread_ts=root["ts"]))
    await rig.wait_post("C1", root["ts"], "Nothing is running right now.")
    assert len(rig.model.requests) == 1


async def test_stop_from_someone_else_is_refused(rig: Rig) -> None:
    slack = rig.slack
    rig.model.script(Reply.tools(tool_use("sleep_for", {"seconds": 1})))
    root = slack.mention("C1", "sleep a second", user="U1")
    await rig.send(root)
    await rig.send(slack.user_message("C1", "stop", user="U2", thread_ts=root["ts"]))
    await rig.wait_post("C1", root["ts"], "Only the person who asked")
    await rig.wait_post("C1", root["ts"], "✅")


async def test_a_refused_user_gets_one_polite_answer_per_thread(slack: FakeSlack, rigs: RigFactory) -> None:
    rig = await rigs(bot_allowed_channels=("C7",))
    root = slack.mention("C1", "hello?")
    await rig.send(root)
    await rig.send(slack.mention("C1", "anyone?", thread_ts=root["ts"]))
    assert [m.text for m in slack.posts_in_thread("C1", root["ts"])] == [DENIAL]
    assert rig.model.requests == []
    assert rig.metrics.counts["events_denied_total"] == 2


async def test_a_long_thread_gives_its_newest_replies_as_context(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """conversations.replies pages from the root forward: the reader walks to the mention, keeping the newest."""
    monkeypatch.setattr(history, "PAGE_SIZE", 3)
    monkeypatch.setattr(history, "MAX_MESSAGES", 4)
    slack = rig.slack
    root = slack.user_message("C1", "the long story", user="U2")
    for i in range(1, 13):
        slack.user_message("C1", f"reply {i}", user="U3", thread_ts=root["ts"])
    await rig.send(slack.mention("C1", "sum it up", thread_ts=root["ts"]))
    await rig.wait_post("C1", root["ts"], "ok")
    [first] = user_texts(rig.model.requests[0])
    lines = [re.sub(r' ts="[^"]*"', "", line) for line in first.split("\n")[:7]]
    assert lines == [
        history.HEADER,
        '<untrusted source="history">',
        '<message from="U2" name="user_u2">the long story</message>',
        "[… 9 earlier replies not shown]",
        '<message from="U3" name="user_u3">reply 10</message>',
        '<message from="U3" name="user_u3">reply 11</message>',
        '<message from="U3" name="user_u3">reply 12</message>',
    ]
    assert len(slack.calls_to("conversations.replies")) == 5, "13 messages, 3 a page"

    monkeypatch.setattr(history, "MAX_PAGES", 2)  # a thread too long to read to the end says so
    other = slack.user_message("C2", "another story", user="U2")
    for i in range(1, 13):
        slack.user_message("C2", f"line {i}", user="U3", thread_ts=other["ts"])
    await rig.send(slack.mention("C2", "and this one?", thread_ts=other["ts"]))
    await rig.wait_post("C2", other["ts"], "ok")
    context = user_texts(rig.model.requests[1])[0]
    assert ">line 5</message>" in context and history.UNREAD in context and "line 6" not in context


async def test_in_a_shared_thread_a_reminder_mentions_who_asked_for_it(rig: Rig) -> None:
    slack = rig.slack
    slack.users["U1"] = {"tz": "Europe/Paris"}
    slack.users["U2"] = {"tz": "Asia/Tokyo"}
    root = slack.mention("C1", "hello", user="U1")
    await rig.send(root)
    await rig.wait_post("C1", root["ts"], "ok")
    rig.model.script(
        Reply.tools(tool_use("schedule_reminder", {"text": "stretch", "in_seconds": 2})),
        Reply.text_only("I will remind you."),
    )
    await rig.send(slack.user_message("C1", "remind me to stretch", user="U2", thread_ts=root["ts"]))
    await rig.wait_post("C1", root["ts"], "I will remind you.")
    await rig.send(slack.user_message("C1", "me too?", user="U1", thread_ts=root["ts"]))  # Alice speaks last
    await rig.wait_post("C1", root["ts"], "⏰ stretch")
    reminder = next(m for m in slack.posts_in_thread("C1", root["ts"]) if "⏰" in m.text)
    assert reminder.text == "<@U2> ⏰ stretch", "Bob asked; Alice spoke last; Bob is reminded"
    session = await rig.core.store.get_session(f"slack:T1:C1:{root['ts']}")
    assert session is not None and (session.address["requester"], session.address["speaker"]) == ("U1", "U1")
    stored = await rig.core.store.get_reminder(1)
    assert stored is not None and (stored.requester, stored.zone) == ("U2", "Asia/Tokyo"), "Bob's, in Bob's zone"
