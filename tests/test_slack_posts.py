"""The post budget against the fake Slack's per-channel limit: pacing, Retry-After, and nothing given up silently."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from fakes.slack_api import FakeSlack
from prometheus_client.parser import text_string_to_metric_families

from bot.slack.client import SlackClient
from bot.slack.posts import PostFailed, PostQueue, PostRejected
from bot.telemetry.metrics import Metrics

SCALE = 10.0  # the fake's minute passes in 6 s: ten posts a second per channel, on both sides


def posted(slack: FakeSlack, channel: str) -> list[str]:
    return [m.text for m in slack.messages(channel)]


async def test_posts_are_paced_per_channel_and_keep_their_order(slack: FakeSlack, client: SlackClient) -> None:
    slack.limit_posts_like_slack(burst=3, time_scale=SCALE)
    posts = PostQueue(client, per_second=SCALE, burst=3)
    texts = {channel: [f"{channel} {i}" for i in range(12)] for channel in ("C1", "C2")}

    async def send(channel: str, text: str) -> str:
        return await posts.post(channel=channel, text=text)

    await asyncio.gather(*(send(channel, text) for channel, ts in texts.items() for text in ts))
    for channel, sent in texts.items():
        assert posted(slack, channel) == sent
        times = [c.time for c in slack.calls_to("chat.postMessage") if c.params["channel"] == channel and c.ok]
        assert times[-1] - times[0] >= (len(times) - 3) / SCALE * 0.9, "beyond the burst, one per 1/SCALE s"
    # Paced, Slack seldom has to say no: unpaced, 18 of these 24 would be refused. Not 0: the two buckets see
    # time at slightly different moments, and a loaded machine widens that gap.
    assert slack.rate_limited["chat.postMessage"] <= 6 and posts.stats.sent == 24


async def test_a_429_pauses_the_channel_for_its_retry_after(slack: FakeSlack, client: SlackClient) -> None:
    metrics = Metrics()
    posts = PostQueue(client, metrics=metrics)
    slack.fail("chat.postMessage", status=429, retry_after=1, times=2)
    assert await posts.post(channel="C1", text="finally")
    calls = slack.calls_to("chat.postMessage")
    assert [c.status for c in calls] == [429, 429, 200]
    assert all(b.time - a.time >= 0.95 for a, b in itertools.pairwise(calls))
    assert (posts.stats.rate_limited, posts.stats.sent) == (2, 1)
    lag = {s.name: s.value for f in text_string_to_metric_families(metrics.render()) for s in f.samples}
    assert lag["threadbot_slack_post_lag_seconds_count"] == 1, "one post, however many tries"
    assert lag["threadbot_slack_post_lag_seconds_sum"] >= 1.9, "it waited out both pauses"


async def test_a_post_that_never_lands_is_handed_back_not_dropped(slack: FakeSlack, client: SlackClient) -> None:
    posts = PostQueue(client, give_up_after_s=0.8, call_timeout_s=0.3)
    slack.fail("chat.postMessage", status=500, times=None)
    with pytest.raises(PostFailed):
        await posts.post(channel="C1", text="lost?")
    slack.clear_failures()
    slack.stall("chat.postMessage")
    with pytest.raises(PostFailed):
        await posts.post(channel="C1", text="stalled")
    assert posts.stats.failed == 2 and posted(slack, "C1") == []


async def test_a_refused_post_says_why(slack: FakeSlack, client: SlackClient) -> None:
    posts = PostQueue(client)
    slack.fail("chat.postMessage", status=200, error="channel_not_found")
    with pytest.raises(PostRejected) as refused:
        await posts.post(channel="C9", text="anyone?")
    assert refused.value.error == "channel_not_found" and len(slack.calls_to("chat.postMessage")) == 1
