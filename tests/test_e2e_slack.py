"""The Slack daemon as a real process (`python -m bot run`) against the fake Slack and the fake Messages API.

Nothing in the daemon is mocked: slack_bolt, slack_sdk and anthropic talk over sockets to the fakes, which
run in the test's event loop. Every wait is on a condition the fakes observe (an API call, an ack, a model
request), with a timeout; nothing sleeps hoping it is enough.

The harness (the daemon, the script, the `world` and `own` fixtures) is tests/daemon_rig.py.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from typing import Any

import aiohttp
import pytest
from daemon_rig import (
    SIGNING_SECRET,
    U1,
    WAIT_S,
    World,
    bot_posts,
    mention,
    reply,
    wait_status,
    wait_text,
)
from fakes.anthropic_api import Failure, Reply, text, tool_use, user_texts
from fakes.slack_api import StoredMessage, event_callback_body, signed_event_request

from bot import __version__
from bot.agent.fence import said

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio(loop_scope="module")]


def _normalised(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# --- tests on the shared daemon --------------------------------------------------------------------------


async def test_mention_gets_a_threaded_markdown_reply(world: World) -> None:
    slack, channel = world.slack, world.channel
    world.script.add("hi bot", Reply.text_only("Hello **there**."))
    event = await mention(slack, channel, "hi bot")
    answer = await wait_text(slack, channel, event["ts"], "Hello")
    await slack.wait_for(lambda: answer.text == "Hello **there**.", WAIT_S, "the full answer")
    assert answer.thread_ts == event["ts"]
    await slack.wait_for(lambda: len(answer.blocks or []) == 2, WAIT_S, "the answer with its feedback buttons")
    markdown, rating = answer.blocks or []
    assert markdown == {"type": "markdown", "text": "Hello **there**."}
    assert rating["type"] == "context_actions" and rating["elements"][0]["type"] == "feedback_buttons"
    [request] = world.requests("hi bot")
    assert user_texts(request) == [said(U1, "hi bot", ts=event["ts"])]
    assert (channel, event["ts"], "is thinking…") in slack.assistant_statuses


async def test_follow_up_in_thread_continues_without_a_mention(world: World) -> None:
    slack, channel = world.slack, world.channel
    world.script.add("remember 42", Reply.text_only("Noted: 42."), Reply.text_only("It was 42."))
    event = await mention(slack, channel, "remember 42")
    await wait_text(slack, channel, event["ts"], "Noted: 42.")
    chatter = slack.user_message(channel, "unrelated chatter")  # a thread the bot is not part of
    await slack.wait_ack(await slack.send_event(chatter))
    question = await reply(slack, channel, event["ts"], "what was the number?")
    await wait_text(slack, channel, event["ts"], "It was 42.")
    _, second = world.requests("remember 42")
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert user_texts(second) == [
        said(U1, "remember 42", ts=event["ts"]),
        said(U1, "what was the number?", ts=question["ts"]),
    ]
    assert not any("unrelated chatter" in t for r in world.model.requests for t in user_texts(r))


async def test_direct_message_starts_a_session(world: World) -> None:
    slack = world.slack
    world.script.add("hello in private", Reply.text_only("Hi in private."))
    event = slack.user_message("D1", "hello in private", user="U2")
    await slack.wait_ack(await slack.send_event(event))
    answer = await wait_text(slack, "D1", event["ts"], "Hi in private.")
    assert answer.thread_ts == event["ts"]


async def test_duplicate_deliveries_give_one_turn(world: World) -> None:
    slack, channel = world.slack, world.channel
    world.script.add("do it once", Reply.text_only("Just once."), Reply.text_only("Second turn."))
    event = slack.mention(channel, "do it once")
    first = await slack.send_event(event)
    await slack.send_event({**event, "type": "message", "channel_type": "channel"})  # the message twin
    await slack.wait_ack(first)
    await slack.wait_ack(await slack.redeliver(first))  # Slack's retry: same event_id, new envelope
    await slack.wait_ack(await slack.redeliver(first))
    await wait_text(slack, channel, event["ts"], "Just once.")
    # Events of one thread are handled in order, so once this reply is answered, every duplicate was seen.
    again = await reply(slack, channel, event["ts"], "and again")
    await wait_text(slack, channel, event["ts"], "Second turn.")
    assert [user_texts(r)[-1] for r in world.requests("do it once")] == [
        said(U1, "do it once", ts=event["ts"]),
        said(U1, "and again", ts=again["ts"]),
    ]


async def test_status_message_shows_progress_and_the_end(world: World) -> None:
    slack, channel = world.slack, world.channel
    world.script.add(
        "sleep 3 seconds",
        Reply.tools(tool_use("sleep_for", {"seconds": 3}), text="Sleeping a bit."),
        Reply.text_only("Rested."),
    )
    event = await mention(slack, channel, "sleep 3 seconds")
    await wait_text(slack, channel, event["ts"], "Rested.")
    status = await wait_status(slack, channel, event["ts"])
    await slack.wait_for(lambda: "✅" in status.text, WAIT_S, "the final status")
    revisions = [r.text for r in status.history]
    assert "`sleep_for(seconds=3)`" in revisions[0]
    assert any(re.search(r"⏳ .* — running \ds · slept \ds of 3s", t) for t in revisions), revisions
    assert re.search(r"✅ `sleep_for\(seconds=3\)` — done in 3\.\ds", status.text)
    said, line = status.history[0].blocks or [{}, {}]
    assert said == {"type": "markdown", "text": "Sleeping a bit."}, "the words before the call are on its status"
    assert line["accessory"]["action_id"] == "cancel_call"
    assert "accessory" not in (status.blocks or [{}, {}])[1]
    answers = [m.text for m in bot_posts(slack, channel, event["ts"]) if m is not status]
    assert answers == ["Rested."], "a tool turn posts twice: the status (with the words before it) and the answer"


async def test_reply_while_a_tool_runs_is_injected(world: World) -> None:
    slack, channel = world.slack, world.channel
    world.script.add(
        "sleep for a while",
        Reply.tools(tool_use("sleep_for", {"seconds": 30})),
        Reply.text_only("Understood, hurrying."),
    )
    event = await mention(slack, channel, "sleep for a while")
    status = await wait_status(slack, channel, event["ts"])
    note = await reply(slack, channel, event["ts"], "actually, hurry up")
    await slack.wait_for(lambda: "eyes" in slack.reactions_on(channel, note["ts"]), WAIT_S, "the eyes reaction")
    await wait_text(slack, channel, event["ts"], "Understood, hurrying.")
    second = world.requests("sleep for a while")[1]
    said = f'[mid-turn user note] <message from="U1" name="user_u1" ts="{note["ts"]}">actually, hurry up</message>'
    assert said in user_texts(second)
    await reply(slack, channel, event["ts"], "stop")  # end the background sleep
    await slack.wait_for(lambda: "cancelled by <@U1>" in status.text, WAIT_S, "the cancelled status")


async def test_cancel_reactions_on_status_message_and_request(world: World) -> None:
    slack, model, channel = world.slack, world.model, world.channel
    world.script.add("first job", Reply.tools(tool_use("sleep_for", {"seconds": 30})))
    world.script.add("second job", Reply.tools(tool_use("sleep_for", {"seconds": 30})))
    event = await mention(slack, channel, "first job")
    status = await wait_status(slack, channel, event["ts"])
    await slack.send_event(slack.reaction_added("U2", "x", channel, status.ts))  # not the requester: ignored
    await slack.send_event(slack.reaction_added("U1", "thumbsup", channel, status.ts))  # not a cancel reaction
    sent = time.perf_counter()
    await slack.send_event(slack.reaction_added("U1", "x", channel, status.ts))
    await slack.wait_for(lambda: len(world.requests("first job")) == 2, WAIT_S, "the model told of the cancel")
    arrived = model.request_times[model.requests.index(world.requests("first job")[1])]
    assert arrived - sent < 1.0, "the cancelled call should reach the model within a second"
    results = world.requests("first job")[1]["messages"][-1]["content"]
    assert [block["content"] for block in results] == ["cancelled by U1"]
    await slack.wait_for(lambda: "🚫" in status.text and "cancelled by <@U1>" in status.text, WAIT_S, "🚫 status")

    other = await mention(slack, channel, "second job")
    second_status = await wait_status(slack, channel, other["ts"])
    await slack.send_event(slack.reaction_added("U1", "octagonal_sign", channel, other["ts"]))  # on the request
    await wait_text(slack, channel, other["ts"], "Stopped by <@U1>")
    await slack.wait_for(lambda: "cancelled by <@U1>" in second_status.text, WAIT_S, "the cancelled status")


async def test_cancel_button_cancels_its_call(world: World) -> None:
    slack, channel = world.slack, world.channel
    keep, stop = tool_use("sleep_for", {"seconds": 2}), tool_use("sleep_for", {"seconds": 30})
    world.script.add("two sleeps", Reply.tools(keep, stop), Reply.text_only("One was cancelled."))
    event = await mention(slack, channel, "two sleeps")
    status = await wait_status(slack, channel, event["ts"])
    sent = time.perf_counter()
    envelope = await slack.send_interactive(slack.block_action(channel, status.ts, "cancel_call", stop["id"]))
    await slack.wait_ack(envelope)
    await slack.wait_for(lambda: "cancelled by <@U1>" in status.text, WAIT_S, "the cancelled status")
    assert time.perf_counter() - sent < 3.0
    await wait_text(slack, channel, event["ts"], "One was cancelled.")
    results = {b["tool_use_id"]: b["content"] for b in world.requests("two sleeps")[1]["messages"][-1]["content"]}
    assert results == {keep["id"]: "slept for 2s", stop["id"]: "cancelled by U1"}
    await slack.wait_for(lambda: "✅" in status.text and "🚫" in status.text, WAIT_S, "both final states")


async def test_stop_reply_cancels_the_turn_and_its_calls(world: World) -> None:
    slack, channel = world.slack, world.channel
    world.script.add(
        "sleep twice", Reply.tools(tool_use("sleep_for", {"seconds": 30}), tool_use("sleep_for", {"seconds": 40}))
    )
    event = await mention(slack, channel, "sleep twice")
    status = await wait_status(slack, channel, event["ts"])
    stop = await reply(slack, channel, event["ts"], "stop")
    await wait_text(slack, channel, event["ts"], "🛑 Stopped by <@U1>.")
    await slack.wait_for(lambda: status.text.count("cancelled by <@U1>") == 2, WAIT_S, "both calls cancelled")
    assert "octagonal_sign" in slack.reactions_on(channel, stop["ts"])
    assert len(world.requests("sleep twice")) == 1


async def test_rate_limit_storm_on_chat_update_loses_no_final_state(world: World) -> None:
    slack, channel = world.slack, world.channel
    answer = "\n\n".join(f"Paragraph {i}: " + "all good " * 20 for i in range(6))
    world.script.add(
        "storm",
        Reply.tools(tool_use("sleep_for", {"seconds": 2}), tool_use("sleep_for", {"seconds": 1}), text="Working."),
        Reply.text_only(answer),
    )
    before = slack.rate_limited["chat.update"]
    slack.fail("chat.update", status=429, retry_after=1, times=4)
    event = await mention(slack, channel, "storm")
    await slack.wait_for(lambda: slack.rate_limited["chat.update"] >= before + 4, WAIT_S, "four 429s")
    status = await wait_status(slack, channel, event["ts"])
    await slack.wait_for(lambda: status.text.count("✅") == 2, WAIT_S, "both calls done on the status message")
    await slack.wait_for(
        lambda: any(m.text == answer for m in bot_posts(slack, channel, event["ts"])), WAIT_S, "the whole answer"
    )
    assert not any("accessory" in block for block in status.blocks or [])


async def test_long_answer_is_split_without_losing_text(world: World) -> None:
    slack, channel = world.slack, world.channel
    code = "```python\n" + "\n".join(f"print({i})  # a line of code" for i in range(80)) + "\n```"
    paragraphs = [f"Section {i}. " + " ".join(f"word{i}-{j}" for j in range(150)) for i in range(9)]
    answer = "\n\n".join([*paragraphs[:4], code, *paragraphs[4:]])
    assert len(answer) >= 12_000
    # Past BOT_UPLOAD_OVER_CHARS the answer is uploaded as a file; when Slack refuses that, it is split instead.
    slack.fail("files.getUploadURLExternal", status=200, error="missing_scope")
    world.script.add("write a lot", Reply.text_only(answer))
    event = await mention(slack, channel, "write a lot")

    def complete() -> list[StoredMessage] | None:
        posts = bot_posts(slack, channel, event["ts"])
        return posts if posts and posts[-1].text.rstrip().endswith("word8-149") else None

    posts = await slack.wait_for(complete, WAIT_S, "the last part")
    assert len(posts) >= 4
    assert all(len(post.text) <= 4_000 for post in posts)
    assert all(post.text.count("```") % 2 == 0 for post in posts)
    assert _normalised(" ".join(post.text for post in posts)) == _normalised(answer)


async def test_failures_are_one_line_in_the_thread_and_the_session_goes_on(world: World) -> None:
    slack, channel = world.slack, world.channel
    world.script.add(
        "break things",
        Reply.tools(tool_use("sleep_for", {"seconds": -5}), text="Trying."),  # the tool refuses its input
        Reply.text_only("That did not work."),
        Failure(400, "invalid_request_error", "max_tokens: too large"),  # a 400 is not retried
        Reply.text_only("Back on track."),
    )
    event = await mention(slack, channel, "break things")
    status = await wait_status(slack, channel, event["ts"])
    await slack.wait_for(lambda: "❌" in status.text and "failed:" in status.text, WAIT_S, "the failed call")
    await wait_text(slack, channel, event["ts"], "That did not work.")
    await reply(slack, channel, event["ts"], "try again")
    line = await wait_text(slack, channel, event["ts"], "Model error")
    assert line.text == "⚠️ Model error: the model rejected the request: max_tokens: too large"
    await reply(slack, channel, event["ts"], "and now?")
    await wait_text(slack, channel, event["ts"], "Back on track.")


# --- tests with a daemon of their own ------------------------------------------------------------------------


async def test_allow_list_denies_politely_once_per_thread(own: World) -> None:
    slack, model, daemon = own.slack, own.model, own.daemon
    daemon.env["BOT_ALLOWED_USERS"] = "U9"
    await daemon.start()
    await daemon.connected()
    own.script.add("I am allowed", Reply.text_only("Welcome, U9."))
    event = await mention(slack, "C1", "let me in", user="U1")
    await mention(slack, "C1", "please?", user="U1", thread_ts=event["ts"])
    await mention(slack, "C1", "I am allowed", user="U9", thread_ts=event["ts"])
    await wait_text(slack, "C1", event["ts"], "Welcome, U9.")
    denials = [m for m in bot_posts(slack, "C1", event["ts"]) if "not set up to answer" in m.text]
    assert len(denials) == 1
    [request] = model.requests  # the refused messages do not reach the model, not even as the thread's context
    [text] = user_texts(request)
    assert text.endswith(">I am allowed</message>") and "let me in" not in text and "please?" not in text
    assert "[2 messages from people not allowed to talk to you were left out]" in text


async def test_restart_mid_session_continues_the_conversation(own: World) -> None:
    slack, model, daemon = own.slack, own.model, own.daemon
    await daemon.start()
    await daemon.connected()
    own.script.add("remember 7", Reply.text_only("I will remember 7."), Reply.text_only("You said 7."))
    event = await mention(slack, "C1", "remember 7")
    await wait_text(slack, "C1", event["ts"], "I will remember 7.")
    assert await daemon.stop() == 0
    await daemon.start()
    await daemon.connected(total=2)
    question = await reply(slack, "C1", event["ts"], "what did I say?")
    await wait_text(slack, "C1", event["ts"], "You said 7.")
    first, second = model.requests
    assert second["messages"][:2] == [
        *first["messages"],
        {"role": "assistant", "content": [text("I will remember 7.")]},
    ]
    assert user_texts(second)[-1] == said(U1, "what did I say?", ts=question["ts"])


async def test_the_log_says_who_and_where_in_words_and_ends_stopped(own: World) -> None:
    daemon = own.daemon
    daemon.env["BOT_MODLE"] = "claude-opus-5-5"  # misspelt: ignored, with a word about it
    await daemon.start()
    await daemon.connected()
    assert await daemon.stop() == 0
    lines = daemon.log().splitlines()
    warnings = [line.split(" WARNING ", 1)[1] for line in lines if " WARNING " in line]
    assert warnings == [
        "bot: BOT_MODLE (set in the environment) is not a threadbot setting and is ignored; did you mean BOT_MODEL?"
    ]  # and none from bolt
    [start] = [line for line in lines if " is up as " in line]
    assert start.endswith(
        f'INFO bot.slack.daemon: threadbot {__version__} is up as @threadbot (UBOT) in team "Threadbot Test" (T1); '
        f"Socket Mode; model claude-sonnet-5-5; data dir {daemon.data_dir.resolve()}"
    )
    assert re.search(r" INFO bot.slack.daemon: threadbot stopped \(\d+\.\ds after the signal\)$", lines[-1]), lines


async def test_a_stop_ends_the_heartbeat_at_once_and_logs_no_traceback(own: World) -> None:
    """A heartbeat decision in flight at SIGTERM is cut short quietly, and no tick starts after the signal."""
    daemon, model = own.daemon, own.model
    (daemon.data_dir / "HEARTBEAT.md").write_text("- check the build\n")
    daemon.env |= {"BOT_HEARTBEAT_INTERVAL_S": "0.2", "BOT_HEARTBEAT_CHANNEL": "C1"}
    never = asyncio.Event()
    model.default = lambda request: Reply.text_only("skip", hold=never)
    await daemon.start()
    await daemon.connected()
    await model.wait_for_requests(1, WAIT_S)
    assert await daemon.stop() == 0
    assert len(model.requests) == 1, "a tick started while the daemon was stopping"
    log = daemon.log()
    assert "Traceback" not in log and " ERROR " not in log, log


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _post_until_up(url: str, raw: bytes, headers: dict[str, str]) -> tuple[int, str]:
    """POST, retrying only while the daemon is not listening yet (bounded by WAIT_S)."""
    deadline = time.monotonic() + WAIT_S
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.post(url, data=raw, headers=headers) as response:
                    return response.status, await response.text()
            except aiohttp.ClientConnectorError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


async def test_http_mode_verifies_signatures_and_answers(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    metrics_port = _free_port()
    daemon.env.update(SLACK_APP_TOKEN="", SLACK_SIGNING_SECRET=SIGNING_SECRET, BOT_METRICS_PORT=str(metrics_port))
    daemon.port = _free_port()
    await daemon.start()
    url = f"http://127.0.0.1:{daemon.port}/slack/events"
    own.script.add("hi over http", Reply.text_only("Hello over HTTP."))
    event = slack.mention("C1", "hi over http")
    forged, forged_headers = signed_event_request(event_callback_body(event), "wrong-secret")
    assert (await _post_until_up(url, forged, forged_headers))[0] == 401
    raw, headers = signed_event_request(event_callback_body(event), SIGNING_SECRET)
    assert (await _post_until_up(url, raw, headers))[0] == 200
    await wait_text(slack, "C1", event["ts"], "Hello over HTTP.")
    assert f"; HTTP events on port {daemon.port} at /slack/events; model " in daemon.log()
    assert slack.connections == []
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{metrics_port}/healthz") as response:
            health = (response.status, await response.json())
        assert health == (200, {"accepting": True, "mode": "http", "status": "ok"})
        async with session.get(f"http://127.0.0.1:{metrics_port}/metrics") as response:
            metrics = await response.text()
    assert "# TYPE threadbot_events_received_total counter" in metrics
    assert "threadbot_events_received_total 1.0\n" in metrics  # the forged request never got past bolt
    assert "threadbot_turns_started_total 1.0\n" in metrics
    assert "threadbot_event_ack_seconds_count 2.0\n" in metrics, "the forged request's refusal is an answer too"
    assert re.search(r"^threadbot_slack_posts_sent [1-9]", metrics, re.MULTILINE), "the post queue's counters too"


async def test_mention_only_channels_answer_only_replies_that_name_the_bot(own: World) -> None:
    """`BOT_MENTION_ONLY_CHANNELS=*`: people in a bot thread talk among themselves unanswered; a reply that
    mentions the bot starts a turn or is injected (👀); a plain `stop` is chatter too; DMs answer as ever."""
    slack, daemon = own.slack, own.daemon
    daemon.env["BOT_MENTION_ONLY_CHANNELS"] = "*"
    await daemon.start()
    await daemon.connected()
    own.script.add(
        "gated start",
        Reply.text_only("Started."),
        Reply.tools(tool_use("sleep_for", {"seconds": 30})),
        Reply.text_only("Heard you."),
    )
    own.script.add("dm under gating", Reply.text_only("DM one."), Reply.text_only("DM two."))
    event = await mention(slack, "C1", "gated start")
    root = event["ts"]
    await wait_text(slack, "C1", root, "Started.")
    await reply(slack, "C1", root, "people talking among themselves")
    sleep = await mention(slack, "C1", "sleep now", thread_ts=root)
    status = await wait_status(slack, "C1", root)
    chatter = await reply(slack, "C1", root, "more chatter while it works")
    note = await mention(slack, "C1", "hurry please", thread_ts=root)
    # One thread's messages are routed in order: once the note is acknowledged, the chatter was seen too.
    await slack.wait_for(lambda: "eyes" in slack.reactions_on("C1", note["ts"]), WAIT_S, "the eyes reaction")
    await wait_text(slack, "C1", root, "Heard you.")
    plain_stop = await reply(slack, "C1", root, "stop")
    await mention(slack, "C1", "stop", thread_ts=root)
    await slack.wait_for(lambda: "cancelled by <@U1>" in status.text, WAIT_S, "the cancelled status")
    assert slack.reactions_on("C1", chatter["ts"]) == {}
    assert slack.reactions_on("C1", plain_stop["ts"]) == {}
    texts = [t for r in own.requests("gated start") for t in user_texts(r)]
    assert "[mid-turn user note] " + said(U1, "hurry please", ts=note["ts"]) in texts
    assert not any("chatter" in t or "among themselves" in t for t in texts)
    assert [user_texts(r)[-1] for r in own.requests("gated start")][:2] == [
        said(U1, "gated start", ts=root),
        said(U1, "sleep now", ts=sleep["ts"]),
    ]

    dm = slack.user_message("D1", "dm under gating", user="U2")
    await slack.wait_ack(await slack.send_event(dm))
    await wait_text(slack, "D1", dm["ts"], "DM one.")
    await reply(slack, "D1", dm["ts"], "a reply without a mention", user="U2")
    await wait_text(slack, "D1", dm["ts"], "DM two.")


async def _healthz(port: int) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/healthz") as response:
        return response.status, await response.json()


async def _metric(port: int, name: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as response:
        text = await response.text()
    match = re.search(rf"^threadbot_{name} (\S+)$", text, re.MULTILINE)
    assert match, text
    return float(match.group(1))


async def _healthz_until(port: int, wanted: Any, what: str) -> dict[str, Any]:
    """Ask /healthz until `wanted(status, report)` holds (another process: nothing to wait on but its answers)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            status, report = await _healthz(port)
            if wanted(status, report):
                return report
        except aiohttp.ClientConnectorError:
            status, report = 0, {}
        if time.monotonic() > deadline:
            raise AssertionError(f"/healthz never showed {what}; last: {status} {report}")
        await asyncio.sleep(0.05)


async def test_a_socket_that_stops_answering_pings_is_replaced_and_healthz_says_so(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    port = _free_port()
    daemon.env.update(BOT_METRICS_PORT=str(port), BOT_SOCKET_PING_INTERVAL_S="0.5")
    await daemon.start()
    await daemon.connected()
    up = await _healthz_until(port, lambda status, report: status == 200, "a healthy daemon")
    assert up["status"] == "ok" and up["mode"] == "socket"
    assert (up["socket"]["connected"], up["socket"]["sessions"], up["socket"]["reconnects"]) == (True, 1, 0)
    assert up["socket"]["last_envelope_at"] is not None  # Slack's hello

    released = slack.hold("apps.connections.open")  # the replacement waits, so the outage is visible
    slack.open_connections[-1].answers_pings = False
    down = await _healthz_until(port, lambda status, report: status == 503, "the lost connection")
    assert (down["status"], down["socket"]["connected"]) == ("disconnected", False)
    released.set()
    await daemon.connected(total=2)
    back = await _healthz_until(port, lambda status, report: status == 200, "the new connection")
    assert (back["socket"]["connected"], back["socket"]["reconnects"]) == (True, 1)
    assert await _metric(port, "socket_reconnects_total") == 1
    assert await _metric(port, "socket_connected") == 1

    own.script.add("after the outage", Reply.text_only("Still here."))
    event = await mention(slack, "C1", "after the outage")
    await wait_text(slack, "C1", event["ts"], "Still here.")


async def test_a_socket_silent_for_too_long_is_replaced(own: World) -> None:
    """Pings are answered, but no envelope comes: after BOT_SOCKET_MAX_SILENCE_S the daemon reconnects anyway."""
    daemon = own.daemon
    port = _free_port()
    daemon.env.update(BOT_METRICS_PORT=str(port), BOT_SOCKET_MAX_SILENCE_S="1")
    await daemon.start()
    await daemon.connected()
    await daemon.connected(total=2)
    report = await _healthz_until(port, lambda status, report: status == 200, "the new connection")
    assert report["socket"]["reconnects"] >= 1
    assert "no Socket Mode envelope for 1s: replacing the connection" in daemon.log()


async def test_metrics_show_the_shape_of_a_tool_turn(own: World) -> None:
    """Histograms of what a turn went through, by model and by tool, beside the tokens and their cost."""
    port = _free_port()
    own.daemon.env.update(BOT_METRICS_PORT=str(port))
    own.script.add(
        "count for the metrics",
        Reply.tools(tool_use("sleep_for", {"seconds": 2}), text="Counting."),  # long enough for its status's edits
        Reply.text_only("Three."),
    )
    await own.daemon.start()
    await own.daemon.connected()
    event = await mention(own.slack, "C1", "count for the metrics")
    await wait_text(own.slack, "C1", event["ts"], "Three.")
    model = 'model="claude-sonnet-5-5"'
    wanted = {
        "threadbot_turn_duration_seconds_count": 1,
        f"threadbot_model_request_seconds_count{{{model}}}": 2,
        f"threadbot_model_first_token_seconds_count{{{model}}}": 2,
        'threadbot_tool_call_seconds_count{tool="sleep_for"}': 1,
        "threadbot_event_ack_seconds_count": 2,  # the mention and its message twin
    }
    deadline = time.monotonic() + WAIT_S
    while True:  # another process: nothing to wait on but its answers
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
        values = {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line and not line.startswith("#")
        }
        if all(values.get(name, 0) >= count for name, count in wanted.items()) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert {name: values.get(name) for name in wanted} == wanted
    assert values["threadbot_slack_post_lag_seconds_count"] >= 1
    assert values["threadbot_slack_edit_lag_seconds_count"] >= 1
    assert values[f"threadbot_model_output_tokens_total{{{model}}}"] > 0
    assert values[f"threadbot_model_cost_usd_total{{{model}}}"] > 0
    assert values["threadbot_turns_started_total"] == 1


async def test_a_kill_9_mid_call_keeps_the_words_on_the_status_message_and_lands_its_final_state(own: World) -> None:
    """The model's words before its call live on the call's status message (classic mode): a repaint after a
    restart, which knows only the calls, must not wipe them."""
    slack, daemon = own.slack, own.daemon
    own.script.add("sleep 30 seconds", Reply.tools(tool_use("sleep_for", {"seconds": 30}), text="Long one."))
    await daemon.start()
    await daemon.connected()
    event = await mention(slack, "C1", "sleep 30 seconds")
    status = await wait_status(slack, "C1", event["ts"])
    await slack.wait_for(lambda: "slept" in status.text or None, WAIT_S, "the call running")
    assert daemon.process is not None
    daemon.process.kill()
    await daemon.process.wait()
    daemon.process = None
    await daemon.start()
    await daemon.connected(total=2)
    await slack.wait_for(lambda: "👻" in status.text or None, WAIT_S * 2, "the orphaned status")
    assert (status.blocks or [{}])[0] == {"type": "markdown", "text": "Long one."}
    # The words were never a post of their own (the resumed turn's later answer may have landed by now).
    assert [m for m in bot_posts(slack, "C1", event["ts"]) if "Long one." in m.text] == [status]
