"""The fake's streams behave as Slack documents them, so the bot's streaming is tested against the real rules."""

from __future__ import annotations

import pytest
from fakes.slack_api import FakeSlack
from fakes.slack_streams import task_cards
from slack_sdk.models.messages.chunk import TaskUpdateChunk

from bot.errors import SlackRateLimited, SlackRefused
from bot.slack.client import SlackClient


async def started(client: SlackClient, channel: str = "C1") -> str:
    answer = await client.chat_startStream(
        channel=channel, thread_ts="1.0", recipient_team_id="T1", recipient_user_id="U1", markdown_text="Hi"
    )
    return str(answer["ts"])


async def test_a_stream_goes_from_streaming_to_stopped_and_then_refuses_more(
    slack: FakeSlack, client: SlackClient
) -> None:
    ts = await started(client)
    task = TaskUpdateChunk(id="t1", title="work", status="in_progress", details="half")
    await client.chat_appendStream(channel="C1", ts=ts, chunks=[task])
    await client.chat_stopStream(channel="C1", ts=ts, markdown_text=" there")
    message = slack.message("C1", ts)
    assert message.text == "Hi there" and task_cards(message.blocks) == [("t1", "in_progress", "half")]
    for call in (
        client.chat_appendStream(channel="C1", ts=ts, markdown_text="x"),
        client.chat_stopStream(channel="C1", ts=ts),
    ):
        with pytest.raises(SlackRefused) as refused:
            await call
        assert refused.value.error == "message_not_in_streaming_state"


async def test_slack_ends_a_stream_at_its_time_limit_or_just_before_a_chosen_call(
    slack: FakeSlack, client: SlackClient
) -> None:
    slack.streams.limit_s = 0.0
    ts = await started(client)
    with pytest.raises(SlackRefused, match="message_not_in_streaming_state"):
        await client.chat_appendStream(channel="C1", ts=ts, markdown_text="late")
    assert slack.streams.of("C1", ts).ended_by == "limit"  # type: ignore[union-attr]
    slack.streams.limit_s = 300.0
    ts = await started(client)
    slack.streams.expire_before("chat.stopStream")
    await client.chat_appendStream(channel="C1", ts=ts, markdown_text=" still on")
    with pytest.raises(SlackRefused, match="message_not_in_streaming_state"):
        await client.chat_stopStream(channel="C1", ts=ts)
    assert slack.message("C1", ts).text == "Hi still on", "what was streamed stays"


async def test_a_channel_stream_needs_its_recipient_a_dm_does_not(slack: FakeSlack, client: SlackClient) -> None:
    with pytest.raises(SlackRefused, match="missing_recipient_team_id"):
        await client.chat_startStream(channel="C1", thread_ts="1.0", markdown_text="x")
    with pytest.raises(SlackRefused, match="missing_recipient_user_id"):
        await client.chat_startStream(channel="C1", thread_ts="1.0", recipient_team_id="T1", markdown_text="x")
    await client.chat_startStream(channel="D1", thread_ts="1.0", markdown_text="x")


async def test_chunks_are_checked_with_the_sdks_models(slack: FakeSlack, client: SlackClient) -> None:
    ts = await started(client)
    for chunk in ({"type": "nonsense"}, {"type": "task_update", "id": "t", "title": "x", "status": "done"}):
        with pytest.raises(SlackRefused, match="invalid_chunks"):
            await client.chat_appendStream(channel="C1", ts=ts, chunks=[chunk])
    with pytest.raises(SlackRefused, match="msg_too_long"):
        await client.chat_appendStream(channel="C1", ts=ts, markdown_text="x" * 12_001)


async def test_the_stream_methods_have_their_tiers(slack: FakeSlack, client: SlackClient) -> None:
    slack.streams.limit_like_slack()
    for _ in range(20):
        await started(client)
    with pytest.raises(SlackRateLimited):
        await started(client)
