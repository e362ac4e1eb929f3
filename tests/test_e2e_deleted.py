"""A message deleted in Slack leaves the stored history (the database's bytes, -wal included) and the model's
next request."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.anthropic_api import Reply
from test_e2e_slack import World, mention, own, reply, wait_text

__all__ = ["own"]  # the fixture, imported so pytest finds it here
pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]

SECRET = "my password is HUNTER2-LEAKED"


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
    assert SECRET.encode() in db_bytes(daemon.data_dir)

    await slack.wait_ack(await slack.send_event(slack.message_deleted(own.channel, leaked["ts"])))
    await slack.wait_for(
        lambda: "removed from" in daemon.log() and SECRET.encode() not in db_bytes(daemon.data_dir),
        10,
        "the deleted text gone from the database files",
    )
    await reply(slack, own.channel, root["ts"], "and now?")
    await wait_text(slack, own.channel, root["ts"], "Ok.")
    last = own.requests("help me log in")[-1]
    assert SECRET not in str(last["messages"]), "the model no longer sees it"
    assert "[a message deleted in Slack]" in str(last["messages"])
    assert SECRET.encode() not in db_bytes(daemon.data_dir)
