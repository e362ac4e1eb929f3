"""The crash and fault suite: a real daemon killed with SIGKILL at chosen points, and Slack failing, then restarted.

Each kill point is chosen by a gate in a fake, never by timing: the fake Messages API holds a stream open
(`Reply(hold=…)`), the fake Slack holds `chat.postMessage` before it takes effect or after (`hold(after=…)`)
or answers 500 for a while. The test waits until the fake has seen the request it gates, kills the daemon,
restarts it on the same data dir and checks what the issue promises: every acked message answered (its
thread told first), no answer twice, interrupted calls 👻 orphaned, each due reminder posted once, and
`PRAGMA integrity_check` ok.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from daemon_rig import U1, WAIT_S, Daemon, World, bot_posts, mention, reply, wait_status, wait_text
from fakes.anthropic_api import Reply, tool_results, tool_use, user_texts
from fakes.slack_api import ApiCall, FakeSlack, StoredMessage

from bot.agent.engine import RESTART_NOTICE
from bot.agent.fence import said, untrusted
from bot.slack.files import RESTARTED_WHILE_READING

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]

OWED_POST_EVENT = "threadbot_post"
"""The mark on every post the outbox owes; a reminder's is the one that also carries the ⏰."""
WORDS = json.dumps({"words": 3})


async def kill(daemon: Daemon) -> None:
    """SIGKILL: no shutdown code runs, nothing is flushed."""
    process, daemon.process = daemon.process, None
    assert process is not None and process.returncode is None, f"the daemon had already stopped:\n{daemon.log()}"
    process.kill()
    await process.wait()


async def restart(daemon: Daemon) -> None:
    await daemon.start()
    await daemon.connected(total=daemon.runs)


def integrity(data_dir: Path) -> str:
    with sqlite3.connect(data_dir / "bot.db") as db:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])


def texts_with(slack: FakeSlack, channel: str, thread_ts: str, needle: str) -> list[StoredMessage]:
    return [m for m in bot_posts(slack, channel, thread_ts) if needle in m.text]


def is_reminder(text: str | None, metadata: dict[str, object] | None) -> bool:
    return "⏰" in (text or "") and (metadata or {}).get("event_type") == OWED_POST_EVENT


def reminder_posts(slack: FakeSlack, channel: str, thread_ts: str) -> list[StoredMessage]:
    return [m for m in bot_posts(slack, channel, thread_ts) if is_reminder(m.text, m.extra.get("metadata"))]


async def finish(world: World) -> None:
    """Stop cleanly and check the database file."""
    assert await world.daemon.stop() == 0, world.daemon.log()
    assert integrity(world.daemon.data_dir) == "ok"


async def test_kill_mid_stream_then_the_question_is_answered_once(own: World) -> None:
    slack, model, daemon = own.slack, own.model, own.daemon
    await daemon.start()
    await daemon.connected()
    own.script.add("how tall is the tower", Reply.text_only("Let me think", hold=asyncio.Event()))
    own.script.add("how tall is the tower", Reply.text_only("It is 330 m tall."))
    event = await mention(slack, "C1", "how tall is the tower?")
    await model.wait_for_requests(1)
    await kill(daemon)

    await restart(daemon)
    await wait_text(slack, "C1", event["ts"], "It is 330 m tall.")
    assert user_texts(model.requests[1]) == [said(U1, "how tall is the tower?", ts=event["ts"])]
    await finish(own)
    assert len(texts_with(slack, "C1", event["ts"], "It is 330 m tall.")) == 1
    assert len(texts_with(slack, "C1", event["ts"], RESTART_NOTICE)) == 1
    assert len(model.requests) == 2 and not model.rejections


def answered(data_dir: Path) -> bool:
    with sqlite3.connect(data_dir / "bot.db") as db:
        return bool(db.execute("SELECT COUNT(*) FROM inbox WHERE answered_at IS NOT NULL").fetchone()[0])


async def test_kill_after_the_answer_is_stored_while_its_post_waits_behind_a_slow_one(own: World) -> None:
    """The message is answered in the store while its answer waits in the thread's queue behind a post Slack
    does not answer: the save that marks it answered owes the answer too, so a kill then loses nothing."""
    slack, daemon = own.slack, own.daemon
    await daemon.start()
    await daemon.connected()
    count = tool_use("wordcount", {"text": "a b c"})
    own.script.add("count these words", Reply.tools(count), Reply.text_only("Three words."))
    slack.stall("chat.postMessage", lambda params: "wordcount" in str(params.get("text", "")), times=None)
    event = await mention(slack, "C1", "count these words")
    await slack.wait_for(lambda: answered(daemon.data_dir), WAIT_S, "the message answered in the store")
    assert texts_with(slack, "C1", event["ts"], "Three words.") == [], "the answer still waits behind the status"
    await kill(daemon)

    slack.clear_stalls()
    await restart(daemon)
    await wait_text(slack, "C1", event["ts"], "Three words.")
    await finish(own)
    assert len(texts_with(slack, "C1", event["ts"], "Three words.")) == 1


async def test_kill_mid_tool_then_the_call_is_orphaned_and_the_turn_goes_on(own: World) -> None:
    slack, model, daemon = own.slack, own.model, own.daemon
    await daemon.start()
    await daemon.connected()
    sleep = tool_use("sleep_for", {"seconds": 60})
    own.script.add("nap for a minute", Reply.tools(sleep), Reply.text_only("The nap was cut short."))
    event = await mention(slack, "C1", "nap for a minute")
    status = await wait_status(slack, "C1", event["ts"])
    # Its first progress edit comes a second after the post, long after the post's place was stored.
    await slack.wait_for(lambda: status.edits, WAIT_S, "the call running")
    await kill(daemon)

    await restart(daemon)
    await wait_text(slack, "C1", event["ts"], "The nap was cut short.")
    await slack.wait_for(lambda: "👻" in status.text, WAIT_S, "the call repainted as orphaned")
    assert "orphaned" in tool_results(model.requests[1])[sleep["id"]]
    assert user_texts(model.requests[1]) == [said(U1, "nap for a minute", ts=event["ts"])]
    await finish(own)
    assert len(texts_with(slack, "C1", event["ts"], "The nap was cut short.")) == 1
    assert len(texts_with(slack, "C1", event["ts"], RESTART_NOTICE)) == 1


async def test_kill_between_a_tool_result_and_the_next_model_call(own: World) -> None:
    slack, model, daemon = own.slack, own.model, own.daemon
    await daemon.start()
    await daemon.connected()
    count = tool_use("wordcount", {"text": "one two three"})
    own.script.add(
        "count these words",
        Reply.tools(count),
        Reply.text_only("Counting", hold=asyncio.Event()),  # the call after the result: held, then killed
        Reply.text_only("There are 3 words."),
    )
    event = await mention(slack, "C1", "count these words")
    await model.wait_for_requests(2)
    assert tool_results(model.requests[1]) == {count["id"]: WORDS}
    await kill(daemon)

    await restart(daemon)
    await wait_text(slack, "C1", event["ts"], "There are 3 words.")
    assert tool_results(model.requests[2]) == {count["id"]: WORDS}, "the finished call's result, not an orphan"
    await finish(own)
    assert len(texts_with(slack, "C1", event["ts"], "There are 3 words.")) == 1
    assert len(texts_with(slack, "C1", event["ts"], RESTART_NOTICE)) == 1
    assert not model.rejections


async def test_kill_with_an_injection_acked_but_not_yet_seen_by_the_model(own: World) -> None:
    slack, model, daemon = own.slack, own.model, own.daemon
    daemon.env["BOT_YIELD_ON_INJECTION"] = "false"  # the note waits for the batch: it is acked, not yet stored
    await daemon.start()
    await daemon.connected()
    own.script.add("sleep then report", Reply.tools(tool_use("sleep_for", {"seconds": 60})))
    own.script.add("sleep then report", Reply.text_only("Reporting, in French."))
    event = await mention(slack, "C1", "sleep then report")
    await wait_status(slack, "C1", event["ts"])
    note = await reply(slack, "C1", event["ts"], "answer in French please")
    await slack.wait_for(lambda: "eyes" in slack.reactions_on("C1", note["ts"]), WAIT_S, "the injection acked")
    await kill(daemon)

    await restart(daemon)
    await wait_text(slack, "C1", event["ts"], "Reporting, in French.")
    assert said(U1, "answer in French please", ts=note["ts"]) in user_texts(model.requests[1])
    await finish(own)
    assert len(texts_with(slack, "C1", event["ts"], "Reporting, in French.")) == 1


async def test_kill_while_a_shared_file_downloads_then_the_message_is_answered(own: World) -> None:
    slack, model, daemon = own.slack, own.model, own.daemon
    await daemon.start()
    await daemon.connected()
    own.script.add("what is in this file", Reply.text_only("It did not reach me; please share it again."))
    held = slack.files.hold_downloads()
    report = slack.files.share("report.md", "# Q3\n", "text/markdown", "markdown")
    event = slack.files.attach(slack.mention("C1", "what is in this file"), report)
    await slack.wait_ack(await slack.send_event(event))
    await slack.wait_for(lambda: slack.files.downloads, WAIT_S, "the download under way")
    await kill(daemon)
    held.set()

    await restart(daemon)
    await wait_text(slack, "C1", event["ts"], "It did not reach me")
    assert user_texts(model.requests[0]) == [
        said(U1, "what is in this file", ts=event["ts"]),
        untrusted("file", f"(skipped: {RESTARTED_WHILE_READING})", name="report.md"),
    ]
    await finish(own)
    assert len(texts_with(slack, "C1", event["ts"], RESTART_NOTICE)) == 1
    assert len(model.requests) == 1 and not model.rejections


async def schedule_a_reminder(own: World, words: str, *texts: str) -> dict[str, str]:
    """A turn that sets reminders due in about three seconds (after its answer is posted); returns its root event."""
    own.script.add(
        words,
        Reply.tools(*(tool_use("schedule_reminder", {"text": text, "in_seconds": 3}) for text in texts)),
        Reply.text_only("Reminder set."),
    )
    event = await mention(own.slack, "C1", words)
    await wait_text(own.slack, "C1", event["ts"], "Reminder set.")
    return event


async def wait_reminder_attempt(slack: FakeSlack, *, answered: bool) -> None:
    """Until the fake has a reminder post in flight (`answered=False`) or has answered one (True)."""

    def attempted() -> bool:
        calls = slack.calls if answered else slack.pending
        return any(
            c.method == "chat.postMessage" and is_reminder(c.params.get("text"), c.params.get("metadata"))
            for c in calls
        )

    await slack.wait_for(attempted, WAIT_S, "a reminder post attempt")


async def test_kill_after_a_reminder_claim_before_its_post(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    await daemon.start()
    await daemon.connected()
    event = await schedule_a_reminder(own, "remind me to stretch", "stretch")
    release = slack.hold("chat.postMessage")  # before it takes effect
    await wait_reminder_attempt(slack, answered=False)
    await kill(daemon)
    # The fake drops a request whose client is gone; released after that, it never takes effect.
    await slack.wait_for(lambda: not slack.pending, WAIT_S, "the killed client's post dropped")
    release.set()

    await restart(daemon)
    await slack.wait_for(lambda: reminder_posts(slack, "C1", event["ts"]), WAIT_S, "the reminder posted")
    await finish(own)
    assert [m.text for m in reminder_posts(slack, "C1", event["ts"])] == ["<@U1> ⏰ stretch"]


async def test_kill_after_slack_stored_a_reminder_but_before_the_daemon_heard(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    await daemon.start()
    await daemon.connected()
    event = await schedule_a_reminder(own, "remind me to drink", "drink water")
    release = slack.hold("chat.postMessage", after=True)  # Slack stores it, the answer never arrives
    await slack.wait_for(lambda: reminder_posts(slack, "C1", event["ts"]), WAIT_S, "the reminder stored")
    await kill(daemon)
    release.set()

    await restart(daemon)

    def checked() -> list[ApiCall]:
        return [c for c in slack.calls_to("conversations.replies") if c.params.get("include_all_metadata")]

    await slack.wait_for(checked, WAIT_S, "the restart checking the thread for the reminder")
    await finish(own)  # a clean stop: anything still queued would have been posted by now
    assert [m.text for m in reminder_posts(slack, "C1", event["ts"])] == ["<@U1> ⏰ drink water"]


async def test_a_slack_outage_while_a_reminder_comes_due(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    await daemon.start()
    await daemon.connected()
    event = await schedule_a_reminder(own, "remind me during the outage", "outage over?", "still down?")
    slack.fail("chat.postMessage", status=500, times=None)  # the outage: every post fails until cleared
    await wait_reminder_attempt(slack, answered=True)

    def failed() -> int:
        return sum(c.status == 500 for c in slack.calls_to("chat.postMessage"))

    await slack.wait_for(lambda: failed() >= 6, 30, "posts failing through the outage (SDK and bot retries)")
    slack.clear_failures("chat.postMessage")
    await slack.wait_for(lambda: len(reminder_posts(slack, "C1", event["ts"])) >= 2, 60, "both after the outage")
    await finish(own)
    posted = sorted(m.text for m in reminder_posts(slack, "C1", event["ts"]))
    assert posted == ["<@U1> ⏰ outage over?", "<@U1> ⏰ still down?"]


async def test_a_reminder_post_answered_500_three_times_is_posted_once(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    await daemon.start()
    await daemon.connected()
    event = await schedule_a_reminder(own, "remind me despite errors", "try again")
    slack.fail("chat.postMessage", status=500, times=3)
    await slack.wait_for(lambda: reminder_posts(slack, "C1", event["ts"]), 30, "the reminder posted")
    await finish(own)
    assert [m.text for m in reminder_posts(slack, "C1", event["ts"])] == ["<@U1> ⏰ try again"]
    assert sum(c.status == 500 for c in slack.calls_to("chat.postMessage")) == 3


async def test_sigterm_mid_answer_then_the_next_start_answers(own: World) -> None:
    """A deploy's graceful stop is no answer either: the turn it cut off is resumed by the next start."""
    slack, model, daemon = own.slack, own.model, own.daemon
    await daemon.start()
    await daemon.connected()
    own.script.add("summarise the week", Reply.text_only("Working on it", hold=asyncio.Event()))
    own.script.add("summarise the week", Reply.text_only("A quiet week."))
    event = await mention(slack, "C1", "summarise the week")
    await model.wait_for_requests(1)
    assert await daemon.stop() == 0, daemon.log()

    await restart(daemon)
    await wait_text(slack, "C1", event["ts"], "A quiet week.")
    assert user_texts(model.requests[1]) == [said(U1, "summarise the week", ts=event["ts"])]
    await finish(own)
    assert len(texts_with(slack, "C1", event["ts"], "A quiet week.")) == 1
    assert len(texts_with(slack, "C1", event["ts"], RESTART_NOTICE)) == 1
