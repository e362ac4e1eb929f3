"""The daemon as a real process (`python -m bot run`) against the fake Slack and the fake Messages API.

Nothing in the daemon is mocked: slack_bolt, slack_sdk and anthropic talk over sockets to the fakes, which
run in the test's event loop. Every wait is on a condition the fakes observe (an API call, an ack, a model
request), with a timeout; nothing sleeps hoping it is enough.

Each daemon is forked from a server that has imported the daemon's code once per worker (daemon_fork.py:
importing anthropic alone takes seconds of CPU). Starting one still takes a while, so tests that need no
special settings share one daemon per module (`world`), each in its own channel and with its own scripted model
answers (routed by the conversation's first words). Tests that need their own settings, or a restart, take
`own`: fresh fakes and a daemon not started yet. conftest.py registers this module as a plugin, so every
test module gets these fixtures without importing them.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import os
import re
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from conftest import OPEN_POLICY
from daemon_fork import DaemonProcess, fork_daemon
from fakes.anthropic_api import Failure, FakeAnthropic, Reply, user_texts
from fakes.slack_api import FakeSlack, StoredMessage

from bot.types import Speaker

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 30.0  # an upper bound: generous, so a loaded machine is slow, not failing
START_S = 45.0
"""How long a daemon started just now gets to connect: Python with the engine takes seconds to start on a
loaded machine, and only a broken start takes this long."""
STOP_S = 90.0
"""How long a SIGTERM'd daemon may take: its documented worst case (about 90 s, tests/test_deploy.py). A
stop is quick unless the machine is loaded; only a daemon that never stops should fail a test here."""
SIGNING_SECRET = "test-signing-secret"
U1 = Speaker("U1", "user_u1")
"""The fake Slack's U1 as the model sees them: their id and the name the fake's users.info gives."""
MESSAGE = re.compile(r"<message(?: [a-z]+=\"[^\"]*\")*>(.*)</message>", re.S)


@dataclass
class Daemon:
    """One `python -m bot run` process (forked from bot code imported once, see daemon_fork.py); `stop()` sends
    SIGTERM, waits, and kills if it must."""

    slack: FakeSlack
    model: FakeAnthropic
    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int | None = None
    process: DaemonProcess | None = None
    log_path: Path | None = None
    runs: int = 0

    def environ(self) -> dict[str, str]:
        """The process environment: the fakes, the data dir and `env`, nothing of the developer's shell."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BOT_", "SLACK_", "ANTHROPIC_"))}
        env.update(
            PYTHONPATH=str(ROOT),
            SLACK_API_URL=self.slack.api_url,
            SLACK_BOT_TOKEN="xoxb-test",
            SLACK_APP_TOKEN="xapp-test",
            ANTHROPIC_BASE_URL=self.model.url,
            ANTHROPIC_API_KEY="test",
            BOT_DATA_DIR=str(self.data_dir),
            BOT_POLICY_FILE=str(OPEN_POLICY),
            BOT_SLACK_SURFACE="classic",  # the suite's tests mean the classic surface unless they ask for another
            # The fake Slack sets no edit limit unless a test asks for one: the daemon's own budget (Slack's 50 a
            # minute) would only pace the tests' waits, as for the 20 repaints of a takeover.
            BOT_SLACK_EDITS_PER_MINUTE="600",
        )
        return env | self.env

    async def start(self) -> None:
        self.runs += 1
        self.log_path = self.data_dir / f"daemon-{self.runs}.log"
        args = ["--port", str(self.port)] if self.port is not None else []
        self.log_path.write_bytes(b"")
        self.process = await fork_daemon(["run", *args], env=self.environ(), cwd=self.data_dir, log_path=self.log_path)

    async def connected(self, total: int = 1) -> None:
        try:
            await self.slack.wait_connected(START_S, total=total)
        except TimeoutError:
            raise AssertionError(f"the daemon never connected; log:\n{self.log()}") from None

    async def stop(self, timeout_s: float = STOP_S) -> int | None:
        """SIGTERM and wait; kill (and fail) if it does not stop in time. Returns the exit status."""
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return process.returncode if process else None
        process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError(f"the daemon ignored SIGTERM for {timeout_s}s; log:\n{self.log()}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""


class Script:
    """The model's answers by conversation: a request gets the next reply queued for its first user words."""

    def __init__(self) -> None:
        self.queues: dict[str, list[Reply | Failure]] = {}

    def add(self, prefix: str, *replies: Reply | Failure) -> None:
        self.queues.setdefault(prefix, []).extend(replies)

    def __call__(self, request: dict[str, Any]) -> Reply | Failure:
        first = user_texts(request)[0]
        for prefix, queue in self.queues.items():
            if prefix in first and queue:
                return queue.pop(0)
        return Reply.text_only("ok")


@dataclass
class World:
    """What a test sees: the fakes, the daemon, its own channel and its own part of the model's script."""

    slack: FakeSlack
    model: FakeAnthropic
    daemon: Daemon
    script: Script
    channel: str

    def requests(self, prefix: str) -> list[dict[str, Any]]:
        """The model requests of the conversation that began with `prefix`."""
        return [r for r in self.model.requests if prefix in user_texts(r)[0]]


def words(text: str) -> str:
    """What a person typed, taken out of the attributed form the model reads it in, for a fake model's script
    to answer by; text that is not one message comes back as it is."""
    match = MESSAGE.fullmatch(text)
    return html.unescape(match[1]) if match else text


async def stop_quietly(daemon: Daemon) -> None:
    try:
        await daemon.stop()
    finally:
        if daemon.process is not None and daemon.process.returncode is None:
            daemon.process.kill()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[FakeSlack, FakeAnthropic, Daemon]]:
    """One daemon (Socket Mode, default settings) for the module's ordinary tests; always stopped."""
    async with FakeSlack() as slack, FakeAnthropic() as model:
        daemon = Daemon(slack, model, tmp_path_factory.mktemp("shared-daemon"))
        try:
            await daemon.start()
            await daemon.connected()
            yield slack, model, daemon
        finally:
            await stop_quietly(daemon)


_channels = itertools.count(1)


@pytest_asyncio.fixture(loop_scope="module")
async def world(shared: tuple[FakeSlack, FakeAnthropic, Daemon]) -> World:
    slack, model, daemon = shared
    script = Script()
    model.default = script
    return World(slack, model, daemon, script, f"C{next(_channels):03d}")


@pytest_asyncio.fixture(loop_scope="module")
async def own(tmp_path: Path) -> AsyncIterator[World]:
    """Fresh fakes and a daemon NOT started yet: the test sets `daemon.env` first. Always stopped."""
    async with FakeSlack() as slack, FakeAnthropic() as model:
        script = Script()
        model.default = script
        daemon = Daemon(slack, model, tmp_path)
        try:
            yield World(slack, model, daemon, script, "C1")
        finally:
            await stop_quietly(daemon)


# --- helpers -------------------------------------------------------------------------------------------


def bot_posts(slack: FakeSlack, channel: str, thread_ts: str) -> list[StoredMessage]:
    return slack.posts_in_thread(channel, thread_ts)


def status_posts(slack: FakeSlack, channel: str, thread_ts: str) -> list[StoredMessage]:
    """The bot's status messages: those with a call's line (the model's words before the calls may come first)."""
    return [
        m
        for m in bot_posts(slack, channel, thread_ts)
        if any(str(block.get("block_id", "")).startswith("call:") for block in m.blocks or [])
    ]


async def wait_text(slack: FakeSlack, channel: str, thread_ts: str, needle: str) -> StoredMessage:
    def check() -> StoredMessage | None:
        return next((m for m in bot_posts(slack, channel, thread_ts) if needle in m.text), None)

    return await slack.wait_for(check, WAIT_S, f"a bot post containing {needle!r}")


async def wait_status(slack: FakeSlack, channel: str, thread_ts: str) -> StoredMessage:
    found = await slack.wait_for(lambda: status_posts(slack, channel, thread_ts), WAIT_S, "a status message")
    return found[0]


async def mention(slack: FakeSlack, channel: str, words: str, **kwargs: Any) -> dict[str, Any]:
    """A mention as Slack delivers it in a channel: the `app_mention` event and its `message` twin."""
    event = slack.mention(channel, words, **kwargs)
    ack = await slack.send_event(event)
    await slack.send_event({**event, "type": "message", "channel_type": "channel"})
    await slack.wait_ack(ack)
    return event


async def reply(slack: FakeSlack, channel: str, thread_ts: str, words: str, user: str = "U1") -> dict[str, Any]:
    event = slack.user_message(channel, words, user=user, thread_ts=thread_ts)
    await slack.wait_ack(await slack.send_event(event))
    return event
