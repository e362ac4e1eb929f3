"""slack_sdk's failures as the project's types, against the fake Slack: what the edge matches on."""

from __future__ import annotations

import socket

import pytest
from fakes.slack_api import FakeSlack

from bot.errors import SlackRateLimited, SlackRefused, SlackUnavailable, SlackUnreachable
from bot.slack.client import SlackClient


async def test_a_refusal_carries_slacks_error_code(slack: FakeSlack, client: SlackClient) -> None:
    slack.fail("chat.postMessage", status=200, error="channel_not_found")
    with pytest.raises(SlackRefused) as refused:
        await client.chat_postMessage(channel="C1", text="hi")
    assert (refused.value.method, refused.value.error, refused.value.status) == (
        "chat.postMessage",
        "channel_not_found",
        200,
    )
    assert refused.value.reason == "channel_not_found"


async def test_a_429_says_how_long_to_wait(slack: FakeSlack, client: SlackClient) -> None:
    slack.fail("chat.update", status=429, retry_after=7)
    with pytest.raises(SlackRateLimited) as limited:
        await client.chat_update(channel="C1", ts="1.0", text="x")
    assert limited.value.retry_after_s == 7.0 and limited.value.error == "ratelimited"


@pytest.mark.parametrize(("status", "error"), [(500, "fatal_error"), (503, None), (200, "internal_error")])
async def test_a_server_error_or_a_try_later_code_is_unavailable(
    slack: FakeSlack, client: SlackClient, status: int, error: str | None
) -> None:
    slack.fail("reactions.add", status=status, error=error)
    with pytest.raises(SlackUnavailable) as unavailable:
        await client.reactions_add(channel="C1", timestamp="1.0", name="eyes")
    assert unavailable.value.status == status


async def test_a_later_page_fails_as_the_first_would(slack: FakeSlack, client: SlackClient) -> None:
    root = slack.user_message("C1", "root")
    for n in range(5):
        slack.user_message("C1", f"reply {n}", thread_ts=root["ts"])
    first = await client.conversations_replies(channel="C1", ts=root["ts"], limit=2)
    slack.fail("conversations.replies", status=500)
    with pytest.raises(SlackUnavailable):
        async for _page in first:
            pass


async def test_no_connection_is_unreachable_with_its_cause() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    client = SlackClient(token="xoxb-test", base_url=f"http://127.0.0.1:{port}/api/")
    with pytest.raises(SlackUnreachable) as unreachable:
        await client.auth_test()
    assert unreachable.value.method == "auth.test" and isinstance(unreachable.value.__cause__, OSError)


async def test_an_upload_the_file_host_refuses_is_a_refusal(slack: FakeSlack, client: SlackClient) -> None:
    slack.files.refuse_uploads = True
    root = slack.user_message("C1", "make me a report")
    with pytest.raises(SlackRefused) as refused:
        await client.files_upload_v2(channel="C1", thread_ts=root["ts"], filename="r.md", content="# R\n")
    assert refused.value.method == "files.upload" and "status: 500" in refused.value.reason
    assert slack.files.uploaded("C1", root["ts"]) == []
