"""One process per SQLite database: a second `run` (or `console`, `oneshot`) on a running daemon's BOT_DATA_DIR
is refused with one line, while `usage` and `check` work beside it and the first daemon keeps answering.

Reuses the daemon and helpers of `test_e2e_slack`; the test starts its own daemon (`own`).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from daemon_rig import World, mention, wait_text
from fakes.anthropic_api import Reply
from test_console import START_S, run_bot

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio(loop_scope="module")]


async def test_a_second_daemon_on_the_same_data_dir_is_refused_and_the_first_keeps_working(own: World) -> None:
    daemon, slack = own.daemon, own.slack
    await daemon.start()
    await daemon.connected()
    assert daemon.process is not None
    env, here = daemon.environ(), daemon.data_dir

    second, console, oneshot, usage, check = await asyncio.gather(
        run_bot("run", env=env, cwd=here, timeout_s=START_S),
        run_bot("console", env=env, cwd=here, timeout_s=START_S),
        run_bot("oneshot", "hello", env=env, cwd=here, timeout_s=START_S),
        run_bot("usage", env=env, cwd=here, timeout_s=START_S),
        run_bot("check", env=env, cwd=here, timeout_s=START_S),
    )

    refusal = (
        f"threadbot: BOT_DATA_DIR: {here.resolve()} is in use by another threadbot (pid {daemon.process.pid}): "
        "one process per SQLite database; stop it first, or give this one its own BOT_DATA_DIR"
    )
    code, out, err = second
    assert (code, err.splitlines()) == (1, [refusal]), out + err
    assert (console[0], console[2].splitlines()) == (1, [refusal]), console
    assert oneshot[0] == 1 and refusal.removeprefix("threadbot: BOT_DATA_DIR: ") in json.loads(oneshot[1])["error"]
    assert usage[0] == 0 and check[0] == 0, (usage, check)

    assert daemon.process.returncode is None
    own.script.add("still there", Reply.text_only("Still answering."))
    event = await mention(slack, own.channel, "still there?")
    await wait_text(slack, own.channel, event["ts"], "Still answering.")
