"""A message deleted in Slack leaves the stored history (the database's bytes, -wal included) and the model's
next request."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_rig import World, mention, reply, wait_text
from fakes.anthropic_api import Reply

from tools.sandbox import session_dir

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]

SECRET = "my <b>password</b> & PIN is HUNTER2-LEAKED"
"""With the characters the attributed form escapes: stored, the text does not read as typed."""
WORD = b"HUNTER2-LEAKED"


def db_bytes(data_dir: Path) -> bytes:
    return b"".join(path.read_bytes() for path in data_dir.iterdir() if path.name.startswith("bot.db"))


async def test_a_deleted_message_leaves_the_database_and_what_the_model_sees(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    await daemon.start()
    await daemon.connected()
    own.script.add("help me log in", Reply.text_only("Noted."), Reply.text_only("Noted again."), Reply.text_only("Ok."))
    root = await mention(slack, own.channel, "help me log in")
    await wait_text(slack, own.channel, root["ts"], "Noted.")
    leaked = await reply(slack, own.channel, root["ts"], SECRET)
    await wait_text(slack, own.channel, root["ts"], "Noted again.")
    assert WORD in db_bytes(daemon.data_dir)

    await slack.wait_ack(await slack.send_event(slack.message_deleted(own.channel, leaked["ts"])))
    await slack.wait_for(
        lambda: "removed from" in daemon.log() and WORD not in db_bytes(daemon.data_dir),
        10,
        "the deleted text gone from the database files",
    )
    await reply(slack, own.channel, root["ts"], "and now?")
    await wait_text(slack, own.channel, root["ts"], "Ok.")
    last = own.requests("help me log in")[-1]
    assert WORD.decode() not in str(last["messages"]), "the model no longer sees it"
    assert "[a message deleted in Slack]" in str(last["messages"])
    assert WORD not in db_bytes(daemon.data_dir)


async def test_a_deleted_message_takes_the_files_it_carried(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    await daemon.start()
    await daemon.connected()
    own.script.add("read my notes", *(Reply.text_only(words) for words in ("Listening.", "Read.", "Gone.")))
    root = await mention(slack, own.channel, "read my notes")
    await wait_text(slack, own.channel, root["ts"], "Listening.")
    shared = slack.files.share("vault.txt", f"the vault: {SECRET}", "text/plain")
    carried = slack.files.attach(slack.user_message(own.channel, "here", thread_ts=root["ts"]), shared)
    await slack.wait_ack(await slack.send_event(carried))
    await wait_text(slack, own.channel, root["ts"], "Read.")
    assert WORD in db_bytes(daemon.data_dir) and b"vault.txt" in db_bytes(daemon.data_dir)

    await slack.wait_ack(await slack.send_event(slack.message_deleted(own.channel, carried["ts"])))
    await slack.wait_for(
        lambda: WORD not in db_bytes(daemon.data_dir) and b"vault.txt" not in db_bytes(daemon.data_dir),
        10,
        "the file's name and text gone with its message",
    )
    await reply(slack, own.channel, root["ts"], "still there?")
    await wait_text(slack, own.channel, root["ts"], "Gone.")
    assert "vault" not in str(own.requests("read my notes")[-1]["messages"])


async def test_forget_by_the_starter_after_the_button_leaves_no_trace_and_strangers_are_refused(own: World) -> None:
    slack, daemon = own.slack, own.daemon
    daemon.env = {"BOT_ADMIN_USERS": "UADMIN"}
    await daemon.start()
    await daemon.connected()
    own.script.add("keep this", Reply.text_only("Kept."))
    root = await mention(slack, own.channel, f"keep this: {SECRET}")
    await wait_text(slack, own.channel, root["ts"], "Kept.")
    assert WORD in db_bytes(daemon.data_dir)

    await reply(slack, own.channel, root["ts"], "forget", user="USTRANGER")
    await wait_text(slack, own.channel, root["ts"], "Only the person who started this thread")
    await reply(slack, own.channel, root["ts"], "forget")
    question = await wait_text(slack, own.channel, root["ts"], "Delete everything I stored")
    assert question.blocks and question.blocks[-1]["elements"][0]["action_id"] == "forget_session"
    value = question.blocks[-1]["elements"][0]["value"]
    files = session_dir(daemon.data_dir / "work", value)  # as the session's commands would have left it
    files.mkdir(parents=True)
    (files / "notes.txt").write_text(SECRET)

    click = slack.block_action(own.channel, question.ts, "forget_session", value, user="USTRANGER")
    await slack.wait_ack(await slack.send_interactive(click))
    await slack.wait_for(lambda: any(e.user == "USTRANGER" for e in slack.ephemerals), 10, "the stranger's refusal")
    assert WORD in db_bytes(daemon.data_dir), "a stranger's click forgets nothing"

    click = slack.block_action(own.channel, question.ts, "forget_session", value, user="U1")
    await slack.wait_ack(await slack.send_interactive(click))
    await slack.wait_for(lambda: question.text.startswith("Forgotten"), 10, "the confirmation edited to say so")
    await slack.wait_for(lambda: WORD not in db_bytes(daemon.data_dir), 10, "no trace in the files")
    assert not files.exists(), "the session's work dir goes with it"
