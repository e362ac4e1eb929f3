"""Slack revoking the bot's token, or the app being uninstalled, stops the daemon: one line, exit status 2
(a configuration error, which the systemd unit does not restart), and no more use of Slack."""

from __future__ import annotations

import asyncio

import pytest
from daemon_fork import DaemonProcess
from daemon_rig import WAIT_S, World, mention, wait_text
from fakes.anthropic_api import Reply
from fakes.slack_api import BOT_USER_ID, app_uninstalled_event, tokens_revoked_event

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]


async def started(world: World) -> DaemonProcess:
    await world.daemon.start()
    await world.daemon.connected()
    assert world.daemon.process is not None
    return world.daemon.process


async def test_a_revoked_bot_token_stops_the_daemon_with_one_line_and_status_2(own: World) -> None:
    process = await started(own)
    # A revoked user token is not the bot's: the daemon keeps answering.
    await own.slack.wait_ack(await own.slack.send_event(tokens_revoked_event(oauth=["U1"])))
    own.script.add("still there", Reply.text_only("Still answering."))
    event = await mention(own.slack, own.channel, "still there?")
    await wait_text(own.slack, own.channel, event["ts"], "Still answering.")
    assert process.returncode is None

    await own.slack.send_event(tokens_revoked_event(bot=[BOT_USER_ID]))
    code = await asyncio.wait_for(process.wait(), WAIT_S)
    log = own.daemon.log()
    assert code == 2, log
    assert log.count("Slack sent tokens_revoked") == 2, log  # the log line when it came, the exit line
    assert "threadbot: configuration error: SLACK_BOT_TOKEN: Slack sent tokens_revoked" in log
    assert "Traceback" not in log


async def test_an_uninstalled_app_stops_the_daemon(own: World) -> None:
    process = await started(own)
    await own.slack.send_event(app_uninstalled_event())
    assert await asyncio.wait_for(process.wait(), WAIT_S) == 2, own.daemon.log()
    assert "SLACK_BOT_TOKEN: Slack sent app_uninstalled" in own.daemon.log()
