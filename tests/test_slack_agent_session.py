"""Agent sessions: the status a thread's session should show (a pure state machine), and `AgentSessions`
sending it with the real slack_sdk client to the fake: titles, coalescing, the budget, waits, refusals."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path

import pytest
from fakes.slack_agent import STOPPED_WARNING
from fakes.slack_api import FakeSlack
from slack_sdk.web.async_client import AsyncWebClient

from bot.clock import utcnow
from bot.errors import SlackResponseError
from bot.slack.agent_session import AgentSessions, SessionStatus, status_of
from bot.store import NewReminder, ReminderKind, SqliteStore, Store
from bot.toolcall import CallStatus, Decision, ToolCall

KEY = "slack:T1:C1:1700000000.000100"
CHANNEL, THREAD = "C1", "1700000000.000100"
WAIT_S = 10.0


def call(
    call_id: str = "toolu_1", *, status: CallStatus = CallStatus.RUNNING, asks: bool = False, tool: str = "sleep_for"
) -> ToolCall:
    made = ToolCall(call_id, KEY, f"{KEY}#1", tool, {})
    if status is not CallStatus.PENDING:
        made.transition(CallStatus.RUNNING)
        made.transition(status)
    if asks:
        made.decision = Decision.ASKED
    return made


# --- the state machine -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("turn", "calls", "waits", "expected"),
    [
        (True, [], False, SessionStatus.PROCESSING),
        (False, [call()], False, SessionStatus.PROCESSING),  # a background call outlives its turn
        (False, [call(status=CallStatus.PENDING)], False, SessionStatus.PROCESSING),  # queued for a slot: it will run
        (True, [call(asks=True, tool="ask_user")], False, SessionStatus.PROCESSING),  # the turn itself still runs
        (False, [call(asks=True, tool="ask_user")], False, SessionStatus.SUSPENDED),  # a question waits for a person
        (False, [call(status=CallStatus.PENDING, asks=True)], False, SessionStatus.SUSPENDED),  # an approval
        (False, [call(asks=True), call("toolu_2")], False, SessionStatus.PROCESSING),  # something still runs
        (False, [], True, SessionStatus.SUSPENDED),  # a wait_for pending
        (False, [call(status=CallStatus.COMPLETED)], False, SessionStatus.ACTIVE),
        (False, [call(status=CallStatus.CANCELLED, asks=True)], False, SessionStatus.ACTIVE),
        (False, [], False, SessionStatus.ACTIVE),
    ],
)
def test_the_status_follows_what_runs(turn: bool, calls: list[ToolCall], waits: bool, expected: SessionStatus) -> None:
    assert status_of(turn_running=turn, calls=calls, waiting_for_itself=waits) is expected


# --- sending it --------------------------------------------------------------------------------------------------


@pytest.fixture
async def store(tmp_path: Path) -> Store:
    opened = await SqliteStore.open(tmp_path / "bot.db")
    address = {"edge": "slack", "team": "T1", "channel": CHANNEL, "thread_ts": THREAD, "requester": "U1"}
    await opened.ensure_session(KEY, address | {"title": "Run the nightly build and tell me"})
    yield opened
    await opened.close()


@pytest.fixture
async def sessions(client: AsyncWebClient, store: Store) -> AgentSessions:
    made = AgentSessions(client, store, retry_s=0.05)
    made.start()
    yield made
    await made.close(1.0)


def statuses(slack: FakeSlack) -> list[str]:
    session = slack.agent.session_of(CHANNEL, THREAD)
    return list(session.statuses) if session is not None else []


async def settled(slack: FakeSlack, sessions: AgentSessions, expected: list[str]) -> None:
    await slack.wait_for(lambda: statuses(slack) == expected or None, WAIT_S, f"statuses {expected}")
    await asyncio.wait_for(sessions._idle.wait(), WAIT_S)
    assert statuses(slack) == expected


async def test_a_turn_with_a_long_call_stays_processing_until_the_call_ends(
    slack: FakeSlack, sessions: AgentSessions
) -> None:
    sessions.turn_started(KEY)
    await settled(slack, sessions, ["processing"])
    session = slack.agent.session_of(CHANNEL, THREAD)
    assert session is not None
    assert (session.title, session.initiator) == ("Run the nightly build and tell me", "U1")
    running = call()
    sessions.calls_started(KEY, [running])
    sessions.turn_finished(KEY)  # the turn yields; its call runs on
    await asyncio.wait_for(sessions._idle.wait(), WAIT_S)
    assert statuses(slack) == ["processing"], "nothing new to say: no call spent"
    running.transition(CallStatus.COMPLETED)
    sessions.call_changed(running)
    await settled(slack, sessions, ["processing", "active"])
    calls = slack.calls_to("agents.sessions.setStatus")
    assert "title" not in calls[1].params, "the title goes with the first call only"


async def test_only_the_latest_state_is_sent(slack: FakeSlack, sessions: AgentSessions) -> None:
    held = slack.hold("agents.sessions.setStatus")
    sessions.turn_started(KEY)
    await slack.wait_for(lambda: slack.pending or None, WAIT_S, "the first setStatus")
    for _ in range(5):  # while it is held, the thread flips many times
        sessions.turn_finished(KEY)
        sessions.turn_started(KEY)
    sessions.turn_finished(KEY)
    held.set()
    await settled(slack, sessions, ["processing", "active"])
    assert len(slack.calls_to("agents.sessions.setStatus")) == 2


async def test_a_wait_or_a_question_suspends_the_session(
    slack: FakeSlack, sessions: AgentSessions, store: Store
) -> None:
    sessions.turn_started(KEY)
    await settled(slack, sessions, ["processing"])
    question = call(asks=True, tool="ask_user")
    sessions.calls_started(KEY, [question])
    sessions.turn_finished(KEY)
    await settled(slack, sessions, ["processing", "suspended"])
    question.decision = Decision.ANSWERED
    question.transition(CallStatus.COMPLETED)
    sessions.call_changed(question)
    await settled(slack, sessions, ["processing", "suspended", "active"])
    due = utcnow() + timedelta(minutes=10)
    await store.add_reminder(NewReminder(KEY, ReminderKind.WAKE, "check the build", due))
    sessions.turn_started(KEY)
    sessions.turn_finished(KEY)  # a quick turn that registered a wait_for: its processing is never sent
    await settled(slack, sessions, ["processing", "suspended", "active", "suspended"])


async def test_a_429_is_waited_out_and_the_status_sent_again(
    slack: FakeSlack, client: AsyncWebClient, store: Store
) -> None:
    keys = [f"slack:T1:C1:17000000{i:02d}.000100" for i in range(4)]
    for key in keys:
        await store.ensure_session(key, {"channel": "C1", "thread_ts": key.rsplit(":", 1)[1]})
    sessions = AgentSessions(client, store, per_minute=60.0 * 20, retry_s=0.05)  # 20 a second, a burst of 10
    sessions.start()
    try:
        slack.fail("agents.sessions.setStatus", status=429, retry_after=1)
        for key in keys:
            sessions.turn_started(key)
        await slack.wait_for(lambda: len(slack.agent.agent_sessions) == 4 or None, WAIT_S, "four sessions")
        await asyncio.wait_for(sessions._idle.wait(), WAIT_S)
        assert sessions.sent == 4
        failed = [c for c in slack.calls_to("agents.sessions.setStatus") if not c.ok]
        assert len(failed) == 1, "the 429 was waited out, then that session's status was sent"
        assert [session.statuses for session in slack.agent.agent_sessions.values()] == [["processing"]] * 4
    finally:
        await sessions.close(1.0)


async def test_an_app_that_is_no_agent_says_so_once_and_sends_nothing_more(
    slack: FakeSlack, sessions: AgentSessions, caplog: pytest.LogCaptureFixture
) -> None:
    slack.agent.refuse_agent_methods = "not_authorized"
    with caplog.at_level(logging.WARNING, logger="bot.slack.agent_session"):
        sessions.turn_started(KEY)
        await slack.wait_for(lambda: slack.calls_to("agents.sessions.setStatus") or None, WAIT_S, "a setStatus")
        await asyncio.wait_for(sessions._idle.wait(), WAIT_S)
        sessions.turn_finished(KEY)
        sessions.turn_started(KEY)
        await asyncio.sleep(0)
    assert sessions.refused
    assert len(slack.calls_to("agents.sessions.setStatus")) == 1
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and "not_authorized" in lines[0] and "not declared an agent" in lines[0]


async def test_a_missing_stop_subscription_is_said_once(
    slack: FakeSlack, sessions: AgentSessions, caplog: pytest.LogCaptureFixture
) -> None:
    slack.agent.stopped_subscribed = False
    with caplog.at_level(logging.WARNING, logger="bot.slack.agent_session"):
        sessions.turn_started(KEY)
        await settled(slack, sessions, ["processing"])
        sessions.turn_finished(KEY)
        await settled(slack, sessions, ["processing", "active"])
    assert [STOPPED_WARNING in record.getMessage() for record in caplog.records] == [True]


async def test_a_session_without_a_thread_is_not_an_agent_session(
    slack: FakeSlack, sessions: AgentSessions, store: Store
) -> None:
    await store.ensure_session("heartbeat:C9", {"edge": "slack", "channel": "C9"})
    sessions.turn_started("heartbeat:C9")
    sessions.turn_started(KEY)
    await settled(slack, sessions, ["processing"])
    assert list(slack.agent.agent_sessions) == [(CHANNEL, THREAD)]


def test_the_budget_is_shared_by_the_live_replicas(client: AsyncWebClient, store: Store) -> None:
    sessions = AgentSessions(client, store, per_minute=40.0)
    sessions.share_budget(4)
    assert sessions._bucket.rate == pytest.approx(10.0 / 60.0)


# --- the fake, as Slack documents the method --------------------------------------------------------------------


async def test_the_fake_keeps_sessions_as_slack_documents_them(slack: FakeSlack, client: AsyncWebClient) -> None:
    with pytest.raises(SlackResponseError, match="invalid_arguments"):
        await client.agents_sessions_setStatus(channel_id=CHANNEL, thread_ts=THREAD, status="thinking")
    with pytest.raises(SlackResponseError, match="invalid_arguments"):
        await client.agents_sessions_setStatus(channel_id=CHANNEL, thread_ts=THREAD, status="active", title="x" * 201)
    await client.agents_sessions_setStatus(
        channel_id=CHANNEL, thread_ts=THREAD, status="processing", title="First", initiator_user_id="U1"
    )
    answer = await client.agents_sessions_setStatus(channel_id=CHANNEL, thread_ts=THREAD, status="active", title="2nd")
    assert answer.get("warning") is None
    session = slack.agent.session_of(CHANNEL, THREAD)
    assert session is not None and (session.title, session.statuses) == ("First", ["processing", "active"])
    with pytest.raises(AssertionError, match="not processing"):
        slack.agent.agent_session_stopped("U1", CHANNEL, THREAD)  # Slack shows Stop only while processing
    slack.agent.stopped_subscribed = False
    answer = await client.agents_sessions_setStatus(channel_id=CHANNEL, thread_ts=THREAD, status="processing")
    assert answer.get("warning") == STOPPED_WARNING
    assert slack.agent.agent_session_stopped("U1", CHANNEL, THREAD)["streaming_message_ts"] == []
    slack.agent.refuse_agent_methods = "not_authorized"
    with pytest.raises(SlackResponseError, match="not_authorized"):
        await client.agents_sessions_setStatus(channel_id=CHANNEL, thread_ts=THREAD, status="active")
