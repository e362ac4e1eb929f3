"""The post budget against the fake Slack's per-channel limit: bursts, Retry-After, the allowance a channel learns,
answers ahead of progress, and nothing given up silently."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from fakes.slack_api import FakeSlack
from prometheus_client.parser import text_string_to_metric_families

from bot.slack.client import SlackClient
from bot.slack.posts import PostFailed, PostQueue, PostRejected, Priority
from bot.telemetry.metrics import Metrics

SCALE = 10.0  # the fake's minute passes in 6 s: ten posts a second per channel, on both sides


def posted(slack: FakeSlack, channel: str) -> list[str]:
    return [m.text for m in slack.messages(channel)]


def sent_times(slack: FakeSlack, channel: str) -> list[float]:
    return [c.time for c in slack.calls_to("chat.postMessage") if c.params["channel"] == channel and c.ok]


class Clock:
    """The queue's time, moved by the test: which post was queued when, without waiting for it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def queued(posts: PostQueue, count: int) -> None:
    """Until `count` posts wait for their turn (each task queues its post in its first step)."""
    async with asyncio.timeout(5):
        while posts.waiting < count:  # noqa: ASYNC110 - no time is waited for: the loop lets the tasks run
            await asyncio.sleep(0)


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


async def test_a_quiet_channel_gets_slacks_whole_burst_at_once(slack: FakeSlack, client: SlackClient) -> None:
    slack.limit_posts_like_slack(burst=10, time_scale=SCALE)
    posts = PostQueue(client, per_second=SCALE)
    await asyncio.gather(*(posts.post(channel="C1", text=f"answer {i}") for i in range(10)))
    times = sent_times(slack, "C1")
    assert len(times) == 10 and slack.rate_limited["chat.postMessage"] == 0
    assert times[-1] - times[0] < 6 / SCALE, "not paced out like a burst of 3 (at least 0.7 s here)"
    await asyncio.gather(*(posts.post(channel="C1", text=f"more {i}") for i in range(10)))
    times = sent_times(slack, "C1")
    assert times[-1] - times[0] >= 10 / SCALE * 0.9, "beyond the burst, Slack's rate"
    assert slack.rate_limited["chat.postMessage"] <= 2


async def test_a_refusal_teaches_the_channel_a_smaller_allowance_that_recovers(
    slack: FakeSlack, client: SlackClient
) -> None:
    slack.limit_posts_like_slack(burst=3, time_scale=SCALE)  # a smaller burst than the queue believes in
    posts = PostQueue(client, per_second=SCALE)
    texts = [f"post {i}" for i in range(30)]
    await asyncio.gather(*(posts.post(channel="C1", text=text) for text in texts))
    assert posted(slack, "C1") == texts
    calls = [c for c in slack.calls_to("chat.postMessage") if c.params["channel"] == "C1"]
    refused = [i for i, c in enumerate(calls) if c.status == 429]
    assert refused[0] == 3, "the burst went out until Slack said no"
    assert calls[4].time - calls[3].time >= 0.95, "then the channel waited out Retry-After"
    # Having learned, it stays within Slack's allowance: paced more slowly, it is not refused again (but for
    # the jitter between two clocks on a loaded machine).
    assert len(refused) <= 2 and posts.stats.rate_limited == len(refused)
    rate, burst = posts.allowance("C1")
    assert rate == SCALE, "the rate came back as posts landed"
    assert burst < 10, "the burst it was refused at is not believed in yet again"
    assert posts.allowance("C2") == (SCALE, 10), "other channels learned nothing"


async def test_answers_go_ahead_of_progress_in_a_channel(slack: FakeSlack, client: SlackClient) -> None:
    posts = PostQueue(client, clock=Clock())
    release = slack.hold("chat.postMessage")
    first = asyncio.create_task(posts.post(channel="C1", text="on the wire"))
    await slack.wait_for(lambda: slack.pending, 5, "the first post at Slack")
    order = [("status 1", Priority.PROGRESS), ("answer 1", Priority.ANSWER), ("status 2", Priority.PROGRESS)]
    order += [("answer 2", Priority.ANSWER), ("elsewhere", Priority.PROGRESS)]
    waiting = [asyncio.create_task(posts.post(channel="C1", text=t, priority=p)) for t, p in order[:-1]]
    waiting.append(asyncio.create_task(posts.post(channel="C2", text="elsewhere", priority=Priority.PROGRESS)))
    await queued(posts, 4)
    await slack.wait_for(lambda: len(slack.pending) == 2, 5, "C2 does not wait for C1")
    release.set()
    await asyncio.gather(first, *waiting)
    assert posted(slack, "C1") == ["on the wire", "answer 1", "answer 2", "status 1", "status 2"]


async def test_progress_yields_to_answers_for_a_while_not_for_ever(slack: FakeSlack, client: SlackClient) -> None:
    clock = Clock()
    posts = PostQueue(client, clock=clock, progress_yield_s=60)
    release = slack.hold("chat.postMessage")
    first = asyncio.create_task(posts.post(channel="C1", text="on the wire"))
    await slack.wait_for(lambda: slack.pending, 5, "the first post at Slack")
    waiting = []
    for at, text, priority in [(0, "status", Priority.PROGRESS), (30, "soon after", Priority.ANSWER)]:
        clock.now = at
        waiting.append(asyncio.create_task(posts.post(channel="C1", text=text, priority=priority)))
        await queued(posts, len(waiting))
    clock.now = 61
    waiting.append(asyncio.create_task(posts.post(channel="C1", text="a minute later", priority=Priority.ANSWER)))
    await queued(posts, 3)
    release.set()
    await asyncio.gather(first, *waiting)
    assert posted(slack, "C1") == ["on the wire", "soon after", "status", "a minute later"]


async def test_a_post_given_up_while_waiting_holds_up_nothing(slack: FakeSlack, client: SlackClient) -> None:
    posts = PostQueue(client)
    release = slack.hold("chat.postMessage")
    first = asyncio.create_task(posts.post(channel="C1", text="on the wire"))
    await slack.wait_for(lambda: slack.pending, 5, "the first post at Slack")
    given_up = asyncio.create_task(posts.post(channel="C1", text="never mind", priority=Priority.PROGRESS))
    await queued(posts, 1)
    given_up.cancel()
    later = asyncio.create_task(posts.post(channel="C1", text="still posted"))
    await queued(posts, 1)
    release.set()
    await asyncio.gather(first, later)
    assert given_up.cancelled() and posted(slack, "C1") == ["on the wire", "still posted"]
    assert posts.waiting == 0


async def test_a_channels_backlog_is_its_waiting_posts_at_its_rate(slack: FakeSlack, client: SlackClient) -> None:
    clock = Clock()
    posts = PostQueue(client, clock=clock, per_second=2.0)
    assert posts.backlog_s("C1") == 0.0, "a channel never posted in waits for nothing"
    release = slack.hold("chat.postMessage")
    first = asyncio.create_task(posts.post(channel="C1", text="on the wire"))
    await slack.wait_for(lambda: slack.pending, 5, "the first post at Slack")
    waiting = [asyncio.create_task(posts.post(channel="C1", text=f"next {i}")) for i in range(4)]
    await queued(posts, 4)
    assert posts.backlog_s("C1") == pytest.approx(2.0), "four posts ahead at two a second"
    assert posts.backlog_s("C2") == 0.0
    release.set()
    await asyncio.gather(first, *waiting)
    assert posts.backlog_s("C1") == 0.0
