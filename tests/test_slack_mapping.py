"""Property: any mix of channels, threads, DMs, message/app_mention twins and redeliveries maps each message
to the session of its thread, and claims it exactly once.

The router runs for real on a real store; only the engine (it records what it is handed) and the Slack client
(no thread history to read) are stand-ins. The expected outcome comes from a small model: a message is taken
the first time one of its deliveries is routable (it mentions the bot, is a DM, or its thread already has a
session) and never again.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.agent.engine import Delivery
from bot.agent.fence import said
from bot.config import load_settings
from bot.coordination import Alone
from bot.errors import SlackRefused
from bot.slack.events import MessageRouter
from bot.slack.filters import classify, session_key
from bot.store import SqliteStore
from bot.telemetry.metrics import Metrics
from bot.types import Speaker

BOT = "UBOT"
ROOTS = ("100.000001", "200.000002")
"""Thread roots that replies may point at (their root message may or may not be part of the run)."""


@dataclass(frozen=True)
class Message:
    channel: str
    ts: str
    thread_ts: str | None
    mentioned: bool

    @property
    def direct(self) -> bool:
        return self.channel.startswith("D")

    @property
    def root(self) -> str:
        return self.thread_ts or self.ts

    @property
    def text(self) -> str:
        return f"<@{BOT}> msg {self.ts}" if self.mentioned else f"msg {self.ts}"

    def event(self, kind: str) -> dict[str, Any]:
        event = {"type": kind, "channel": self.channel, "user": "U1", "text": self.text, "ts": self.ts}
        event["channel_type"] = "im" if self.direct else "channel"
        if self.thread_ts:
            event["thread_ts"] = self.thread_ts
        return event


@st.composite
def messages(draw: st.DrawFn) -> list[Message]:
    count = draw(st.integers(1, 6))
    found = []
    for i in range(count):
        channel = draw(st.sampled_from(["C1", "C2", "D1"]))
        ts = f"{300 + i}.{i:06d}"
        thread_ts = draw(st.sampled_from([None, *ROOTS]))
        found.append(Message(channel, ts, thread_ts, mentioned=draw(st.booleans())))
    return found


@st.composite
def deliveries(draw: st.DrawFn) -> list[tuple[Message, dict[str, Any]]]:
    """Each message's events (an app_mention twin when it mentions the bot), each sent 1-3 times, shuffled."""
    sent = draw(messages())
    out = []
    for message in sent:
        kinds = ["message", "app_mention"] if message.mentioned and not message.direct else ["message"]
        for kind in kinds:
            body = {"team_id": "T1", "event_id": f"Ev{kind}{message.ts}", "event": message.event(kind)}
            out += [(message, body)] * draw(st.integers(1, 3))
    return draw(st.permutations(out))


def twin(message: Message, body: dict[str, Any]) -> bool:
    """The `message` event of a channel mention: its `app_mention` twin carries it."""
    return body["event"]["type"] == "message" and message.mentioned and not message.direct


def expected_claims(order: list[tuple[Message, dict[str, Any]]]) -> list[tuple[str, str]]:
    sessions: set[tuple[str, str]] = set()
    taken: set[str] = set()
    expected = []
    for message, body in order:
        thread = (message.channel, message.root)
        addressed = thread in sessions or message.mentioned or message.direct
        if twin(message, body) or message.ts in taken or not addressed:
            continue
        taken.add(message.ts)
        sessions.add(thread)
        words = message.text.removeprefix(f"<@{BOT}> ")
        expected.append((session_key("T1", *thread), said(Speaker("U1"), words, ts=message.ts)))
    return expected


class RecordingEngine:
    def __init__(self) -> None:
        self.submitted: list[tuple[str, str]] = []

    def submit(self, key: str, content: str, *, inbox_id: int | None = None, requester: str | None = None) -> Delivery:
        assert inbox_id is not None, "every message handed over is in the inbox first"
        self.submitted.append((key, content))
        return Delivery.STARTED

    def is_busy(self, key: str) -> bool:
        return False


class QuietEdge:
    """An edge and its sessions that say nothing and remember nothing; a person is their id."""

    threads = property(lambda self: self)

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None

    async def speaker(self, user: str) -> Speaker:
        return Speaker(user)


class NoHistoryClient:
    async def conversations_replies(self, **kwargs: Any) -> Any:
        raise SlackRefused("conversations.replies", "thread_not_found", error="thread_not_found", status=200)


@given(deliveries())
def test_twins_and_redeliveries_map_to_their_thread(order: list[tuple[Message, dict[str, Any]]]) -> None:
    for message, body in order:
        incoming = classify(body, BOT)
        if twin(message, body):
            assert incoming is None, "left to its app_mention"
            continue
        assert incoming is not None
        assert incoming.key == session_key("T1", message.channel, message.root)
        assert incoming.direct == message.direct and incoming.in_thread == (message.root != message.ts)
        assert incoming.mentioned == (message.mentioned or body["event"]["type"] == "app_mention")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deliveries())
async def test_each_message_is_claimed_once_by_the_right_session(order: list[tuple[Message, dict[str, Any]]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = await SqliteStore.open(Path(directory) / "bot.db")
        try:
            engine = RecordingEngine()
            router = MessageRouter(
                client=NoHistoryClient(),  # type: ignore[arg-type]
                store=store,
                engine=engine,  # type: ignore[arg-type]
                edge=QuietEdge(),  # type: ignore[arg-type]
                sessions=QuietEdge(),  # type: ignore[arg-type]
                settings=load_settings(
                    _env_file=None, bot_data_dir=Path(directory), bot_allowed_users=(), bot_allowed_channels=()
                ),
                bot_user_id=BOT,
                metrics=Metrics(),
                coordination=Alone(store),
            )
            for _, body in order:
                await router.handle(body)
            expected = expected_claims(order)
            assert engine.submitted == expected
            inbox = await store.open_inbox()
            assert sorted((key, item.text) for key, items in inbox.items() for item in items) == sorted(expected)
        finally:
            await store.close()
