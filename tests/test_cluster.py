"""Cluster mode end to end: `threadbot run` replicas on one PostgreSQL, the fake Slack and the fake model."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from cluster_rig import Cluster, rig
from daemon_rig import U1, WAIT_S, mention, reply, wait_status, wait_text, words
from fakes.anthropic_api import Reply, tool_use, user_texts

from bot.agent.fence import said, untrusted

__all__ = ["rig"]  # the fixture, from cluster_rig

pytestmark = [pytest.mark.timeout(180), pytest.mark.cluster]


async def test_one_replica_answers_and_takes_an_injection(rig: Cluster) -> None:
    await rig.start(1)
    rig.script.add(
        "count down", Reply.tools(tool_use("sleep_for", {"seconds": 30})), Reply.text_only("Heard you, done.")
    )
    event = await mention(rig.slack, "C1", "count down")
    await wait_status(rig.slack, "C1", event["ts"])
    note = await reply(rig.slack, "C1", event["ts"], "hurry up")
    await wait_text(rig.slack, "C1", event["ts"], "Heard you, done.")
    second = [r for r in rig.model.requests if "count down" in user_texts(r)[0]][1]
    assert "[mid-turn user note] " + said(U1, "hurry up", ts=note["ts"]) in user_texts(second)
    await reply(rig.slack, "C1", event["ts"], "stop")


async def test_a_message_with_files_is_acked_before_they_are_read_and_answered_with_them(rig: Cluster) -> None:
    await rig.start(2)
    rig.script.add("summarise the notes", Reply.text_only("The notes list one point."))
    held = rig.slack.files.hold_downloads()
    notes = rig.slack.files.share("notes.md", "# Notes\n- one\n", "text/markdown", "markdown")
    event = rig.slack.files.attach(rig.slack.mention("C1", "summarise the notes"), notes)
    await rig.slack.wait_ack(await rig.slack.send_event(event), WAIT_S)  # while its download hangs
    await rig.slack.wait_for(lambda: rig.slack.files.downloads, WAIT_S, "the download under way")
    assert rig.model.requests == []  # its turn waits for the files
    held.set()
    await wait_text(rig.slack, "C1", event["ts"], "The notes list one point.")
    [asked] = rig.model.requests
    assert user_texts(asked) == [
        said(U1, "summarise the notes", ts=event["ts"]),
        untrusted("file", "# Notes\n- one\n", name="notes.md"),
    ]


def echo(request: dict[str, Any]) -> Reply:
    """Every answer names the message it answers, so a lost or doubled one shows."""
    return Reply.text_only(f"re: {words(user_texts(request)[-1])}")


async def test_messages_across_replicas_are_stored_once_answered_once_and_turns_never_overlap(rig: Cluster) -> None:
    rig.slack.routing = "random"
    rig.slack.redeliver_fraction = 0.2
    rig.model.default = echo
    await rig.start(3)

    roots: dict[int, str] = {}
    asked: list[str] = []

    async def thread(n: int) -> None:
        root = await mention(rig.slack, f"C{n % 5}", f"topic {n} q0")
        roots[n] = root["ts"]
        asked.append(said(U1, f"topic {n} q0", ts=root["ts"]))
        await wait_text(rig.slack, f"C{n % 5}", root["ts"], f"re: topic {n} q0")
        for k in range(1, 4):
            question = await reply(rig.slack, f"C{n % 5}", root["ts"], f"topic {n} q{k}")
            asked.append(said(U1, f"topic {n} q{k}", ts=question["ts"]))
            await wait_text(rig.slack, f"C{n % 5}", root["ts"], f"re: topic {n} q{k}")

    await asyncio.gather(*(thread(n) for n in range(50)))
    for n in range(50):
        posts = [m.text for m in rig.slack.posts_in_thread(f"C{n % 5}", roots[n])]
        assert sorted(posts) == sorted(f"re: topic {n} q{k}" for k in range(4)), posts
    stored = await rig.query("SELECT body FROM messages WHERE role = 'user'")
    blocks = [block for (body,) in stored for block in json.loads(body)["content"]]
    texts = [block["text"] for block in blocks if block.get("type") == "text"]
    assert len(asked) == 200
    assert sorted(t for t in texts if words(t).startswith("topic ")) == sorted(asked)
    assert len(rig.slack.redeliveries) > 20  # the duplicates alone are about 20% of 400 envelopes
    assert len(set(rig.slack.deliveries_per_connection())) == 3
    assert len(rig.model.requests) == 200
    assert overlapping_turns(rig) == []


def conversation(request: dict[str, Any]) -> list[tuple[str, str]]:
    """A model request's history as (role, text) pairs, text blocks only, a person's text as the words typed."""
    return [
        (message["role"], words(block["text"]))
        for message in request["messages"]
        for block in message["content"]
        if block.get("type") == "text"
    ]


def overlapping_turns(rig: Cluster) -> list[str]:
    """Requests whose history misses an earlier exchange of their thread.

    Each message is sent only once the answer to the one before it is posted, so a turn that starts only
    after the thread's previous turn ended (the job's lock) sees every earlier question and answer; a turn
    that overlapped the previous one would load a history without the answer that turn was still saving.
    """
    wrong = []
    for request in rig.model.requests:
        *earlier, (_, last) = conversation(request)
        topic, asked = last.rsplit(" q", 1)
        expected = [
            (role, text)
            for k in range(int(asked))
            for role, text in (("user", f"{topic} q{k}"), ("assistant", f"re: {topic} q{k}"))
        ]
        if earlier != expected:
            wrong.append(last)
    return wrong


@pytest.mark.timeout(420)  # three stops under load, each allowed the daemon's worst case
async def test_rolling_sigterm_of_every_replica_under_load_loses_no_acked_message(rig: Cluster) -> None:
    rig.slack.routing = "random"
    rig.model.default = echo
    await rig.start(3)
    sent: list[tuple[str, str, str]] = []

    async def load(stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            event = rig.slack.mention(f"R{n % 20}", f"rolling {n}")
            await rig.slack.send_event(event)
            await rig.slack.send_event({**event, "type": "message", "channel_type": "channel"})
            sent.append((event["channel"], event["ts"], f"rolling {n}"))
            n += 1
            await asyncio.sleep(0.05)

    stop = asyncio.Event()
    loader = asyncio.create_task(load(stop))
    for old in list(rig.replicas):
        enough = len(sent) + 10
        await rig.slack.wait_for(lambda enough=enough: len(sent) >= enough, WAIT_S, "more load")
        await rig.start(1)  # the replacement first, as a rolling deploy does
        assert await old.stop() == 0
    stop.set()
    await loader
    # Every event was acked by some replica (Slack retries what a stopping one left unacked) ...
    events = {e.event_id for e in rig.slack.envelopes if e.event_id}
    await rig.slack.wait_for(lambda: all(rig.slack.event_acked(e) for e in events), WAIT_S, "every event acked")
    assert rig.slack.abandoned == []
    # ... and every acked message was answered once.
    for channel, ts, question in sent:
        await wait_text(rig.slack, channel, ts, f"re: {question}")
        assert len([m for m in rig.slack.posts_in_thread(channel, ts) if m.text == f"re: {question}"]) == 1


async def call_status(rig: Cluster, call_id: str) -> str:
    [(status,)] = await rig.query("SELECT status FROM tool_calls WHERE id = %s", call_id)
    return str(status)


async def test_a_reply_a_reaction_and_a_button_reach_the_turn_through_a_replica_that_does_not_run_it(
    rig: Cluster,
) -> None:
    [owner] = await rig.start(1)  # alone: it runs both threads' turns
    first, second = tool_use("sleep_for", {"seconds": 120}), tool_use("sleep_for", {"seconds": 120})
    rig.script.add("watch one", Reply.tools(first), Reply.text_only("Noted the extra."))
    rig.script.add("watch two", Reply.tools(second), Reply.text_only("Stopped."))
    one, two = await mention(rig.slack, "C1", "watch one"), await mention(rig.slack, "C2", "watch two")
    status_one = await wait_status(rig.slack, "C1", one["ts"])
    status_two = await wait_status(rig.slack, "C2", two["ts"])
    await rig.start(2)  # the fake routes to the newest connection: from now on, never the owner's

    note = await reply(rig.slack, "C1", one["ts"], "also check the logs")
    await wait_text(rig.slack, "C1", one["ts"], "Noted the extra.")
    [_, noted] = [r for r in rig.model.requests if "watch one" in user_texts(r)[0]]
    assert user_texts(noted)[-1] == "[mid-turn user note] " + said(U1, "also check the logs", ts=note["ts"])
    seen = await rig.slack.wait_for(lambda: rig.slack.reactions_on("C1", note["ts"]), WAIT_S, "the 👀 on the note")
    assert list(seen) == ["eyes"]

    await rig.slack.send_event(rig.slack.reaction_added("U2", "x", "C1", status_one.ts))  # not theirs to cancel
    await rig.slack.send_event(rig.slack.reaction_added("U1", "x", "C1", status_one.ts))
    await rig.wait_db(lambda: _is(rig, first["id"], "cancelled"), "the reaction's cancel")
    assert await rig.query("SELECT cancelled_by FROM tool_calls WHERE id = %s", first["id"]) == [("U1",)]
    click = rig.slack.block_action("C2", status_two.ts, "cancel_call", second["id"])
    await rig.slack.wait_ack(await rig.slack.send_interactive(click))
    await rig.wait_db(lambda: _is(rig, second["id"], "cancelled"), "the button's cancel")
    await wait_text(rig.slack, "C2", two["ts"], "Stopped.")
    assert owner.process is not None and owner.process.returncode is None  # the owner cancelled them, still up


async def _is(rig: Cluster, call_id: str, status: str) -> bool:
    return await call_status(rig, call_id) == status


async def test_a_replica_declared_dead_stops_at_once_and_its_thread_goes_on_elsewhere(rig: Cluster) -> None:
    [fenced] = await rig.start(1)
    rig.script.add("fenced job.", Reply.tools(tool_use("sleep_for", {"seconds": 120})), Reply.text_only("Resumed."))
    root = await mention(rig.slack, "C1", "fenced job.")
    status = await wait_status(rig.slack, "C1", root["ts"])
    await rig.slack.wait_for(lambda: status.edits, WAIT_S, "the call running")
    await rig.start(1)
    assert fenced.process is not None
    # What a reaper does to a replica that stopped heartbeating (a frozen VM, a long pause) and then woke up.
    await rig.query("UPDATE replicas SET state = 'dead' WHERE pid = %s", fenced.process.pid)
    async with asyncio.timeout(WAIT_S):
        assert await fenced.process.wait() == 1
    assert "lost its lease" in fenced.log()
    await wait_text(rig.slack, "C1", root["ts"], "Resumed.")
    # The repaint is an edit, paced by the workspace's edit budget, which the live replicas split between them.
    await rig.slack.wait_for(lambda: "👻" in status.text, 60, "the call repainted as orphaned")
    [(state,)] = await rig.query("SELECT status FROM tool_calls")
    assert state == "orphaned"
