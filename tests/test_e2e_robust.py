"""Robustness of the Slack daemon as a real process: bad bytes in an event, and no stray processes.

Reuses the daemon and helpers of `test_e2e_slack`; each test starts its own daemon (`own`), since
one needs the shell and a SIGKILL.
"""

from __future__ import annotations

import pytest
from fakes.anthropic_api import Reply, user_texts
from test_e2e_slack import World, mention, own, wait_text

from bot.text import REPLACEMENT

__all__ = ["own"]  # the fixture, imported so pytest finds it here
pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]


async def test_an_event_with_a_lone_surrogate_is_answered(own: World) -> None:
    slack, channel = own.slack, own.channel
    await own.daemon.start()
    await own.daemon.connected()
    own.script.add("odd bytes", Reply.text_only("I read it."))
    # json.dumps writes the surrogate as the escape `\ud800`, as Slack would; the client decodes it back.
    event = await mention(slack, channel, "odd bytes \ud800 here")
    await wait_text(slack, channel, event["ts"], "I read it.")
    [request] = own.requests("odd bytes")
    assert user_texts(request) == [f"odd bytes {REPLACEMENT} here"]
    assert not any("not valid JSON" in m.text for m in slack.posts_in_thread(channel, event["ts"]))
