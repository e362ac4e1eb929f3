"""The edit budget against the fake Slack, through the real SlackClient: coalescing, spacing, the global rate,
429/5xx handling, priority, and the guarantee that a final state lands unless the message is gone."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from fakes.slack_api import ApiCall, FakeSlack
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler, AsyncServerErrorRetryHandler

from bot.config import Settings
from bot.slack.app import REQUEST_TIMEOUT_S, build_client, slack_http_session
from bot.slack.client import SlackClient
from bot.slack.edits import EditScheduler
from bot.telemetry.metrics import Metrics

MakeScheduler = Callable[..., Awaitable[EditScheduler]]


@pytest.fixture
async def make_scheduler(client: SlackClient) -> AsyncIterator[MakeScheduler]:
    """Started schedulers with a generous budget unless a test says otherwise; always closed afterwards."""
    made: list[EditScheduler] = []

    async def make(**kwargs: Any) -> EditScheduler:
        options: dict[str, Any] = {"per_minute": 60_000, "burst": 1000, "min_interval_s": 0.05} | kwargs
        scheduler = EditScheduler(client, **options)
        await scheduler.start()
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        await scheduler.close(timeout_s=1)


async def post(client: SlackClient, n: int = 1, channel: str = "C1") -> list[str]:
    """Post ``n`` bot messages to edit; returns their ts."""
    return [str((await client.chat_postMessage(channel=channel, text=f"msg {i}"))["ts"]) for i in range(n)]


def updates(slack: FakeSlack, ts: str | None = None) -> list[ApiCall]:
    return [c for c in slack.calls_to("chat.update") if ts is None or c.params["ts"] == ts]


def edits(slack: FakeSlack, ts: str, channel: str = "C1") -> list[str]:
    return [r.text for r in slack.message(channel, ts).edits]


async def test_rapid_updates_coalesce_and_the_last_text_lands(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler
) -> None:
    [ts] = await post(client)
    metrics = Metrics()
    edits_ = await make_scheduler(metrics=metrics)
    for i in range(20):  # all before the worker runs: one call
        edits_.update("C1", ts, text=f"burst {i}")
    await edits_.idle(5)
    assert edits(slack, ts) == ["burst 19"]
    assert (edits_.stats.sent, edits_.stats.coalesced) == (1, 19)
    assert "threadbot_slack_edit_lag_seconds_count 1.0" in metrics.render(), "one message waited, once"

    for i in range(20):  # interleaved with the worker: a few calls, in order, ending on the last text
        edits_.update("C1", ts, text=f"paced {i:02d}")
        await asyncio.sleep(0.005)
    await edits_.idle(5)
    paced = edits(slack, ts)[1:]
    assert paced[-1] == "paced 19" and paced == sorted(paced) and len(paced) < 10


async def test_edits_of_one_message_are_spaced(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler
) -> None:
    [ts, other] = await post(client, 2)
    edits_ = await make_scheduler(min_interval_s=0.1)
    for i in range(25):
        edits_.update("C1", ts, text=f"tick {i}")
        edits_.update("C1", other, text=f"tick {i}")
        await asyncio.sleep(0.02)
    await edits_.idle(5)
    for message in (ts, other):
        times = [c.time for c in updates(slack, message)]
        assert len(times) >= 3 and edits(slack, message)[-1] == "tick 24"
        assert min(b - a for a, b in itertools.pairwise(times)) >= 0.1


async def test_final_lands_through_a_429_storm_and_every_edit_pauses(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler
) -> None:
    [ts, other] = await post(client, 2)
    edits_ = await make_scheduler(max_in_flight=1)
    slack.fail("chat.update", status=429, retry_after=1, times=3)
    edits_.update("C1", other, text="progress")
    edits_.update("C1", ts, text="done", final=True)
    await edits_.idle(10)

    calls = updates(slack)
    assert [c.status for c in calls] == [429, 429, 429, 200, 200]
    assert [c.params["ts"] for c in calls][-2:] == [ts, other]  # the final first, though it arrived second
    assert all(b.time - a.time >= 1.0 for a, b in itertools.pairwise(calls[:4]))  # nothing during a pause
    assert (edits(slack, ts), edits(slack, other)) == (["done"], ["progress"])
    assert (edits_.stats.rate_limited, edits_.stats.retried, edits_.stats.sent) == (3, 3, 2)


async def test_the_daemons_edit_client_leaves_every_429_to_the_scheduler(
    slack: FakeSlack, make_settings: Callable[..., Settings]
) -> None:
    """No 429 is slept out inside the SDK (blocking the one worker blind): each one pauses every edit here."""
    settings = make_settings(slack_bot_token="xoxb-test", slack_api_url=slack.api_url)
    client = build_client(settings, retry_rate_limits=False)  # what serve() gives its EditScheduler
    assert not any(isinstance(h, AsyncRateLimitErrorRetryHandler) for h in client.retry_handlers)
    assert any(isinstance(h, AsyncServerErrorRetryHandler) for h in client.retry_handlers)
    assert any(isinstance(h, AsyncRateLimitErrorRetryHandler) for h in build_client(settings).retry_handlers)
    first, second = await post(client, 2)
    edits_ = EditScheduler(client, per_minute=60_000, burst=1000, min_interval_s=0.05, max_in_flight=1)
    await edits_.start()
    try:
        slack.fail("chat.update", status=429, retry_after=1, times=2)
        edits_.update("C1", first, text="done", final=True)
        await slack.wait_for(lambda: len(updates(slack)) == 1, 5, "the first 429")
        edits_.update("C1", second, text="also done", final=True)
        await edits_.idle(10)
    finally:
        await edits_.close(timeout_s=1)
    assert [c.status for c in updates(slack)] == [429, 429, 200, 200]
    assert (edits(slack, first), edits(slack, second)) == (["done"], ["also done"])
    assert (edits_.stats.rate_limited, slack.rate_limited["chat.update"]) == (2, 2)
    calls = updates(slack)
    assert calls[1].time - calls[0].time >= 0.9 and calls[2].time - calls[1].time >= 0.9, "each 429 paused all"


async def test_final_lands_through_server_errors(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler
) -> None:
    [ts] = await post(client)
    edits_ = await make_scheduler()
    slack.fail("chat.update", status=500, times=2)
    slack.fail("chat.update", status=200, error="internal_error", times=1)
    edits_.update("C1", ts, text="done", final=True)
    await edits_.idle(10)
    assert [c.status for c in updates(slack)] == [500, 500, 200, 200]
    assert edits(slack, ts) == ["done"] and edits_.stats.retried == 3


@pytest.mark.parametrize("error", ["message_not_found", "channel_not_found", "cant_update_message", "is_archived"])
async def test_gone_message_gives_up_without_looping(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler, error: str
) -> None:
    [ts] = await post(client)
    edits_ = await make_scheduler()
    slack.fail("chat.update", status=200, error=error, times=None)
    edits_.update("C1", ts, text="done", final=True)
    await edits_.idle(5)
    assert len(updates(slack)) == 1
    assert (edits_.stats.gone, edits_.stats.sent, edits_.stats.retried) == (1, 0, 0)


async def test_real_gone_answers_from_slack(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler
) -> None:
    users_message = slack.user_message("C1", "not ours")["ts"]
    edits_ = await make_scheduler()
    edits_.update("C1", "1.000001", text="done", final=True)
    edits_.update("C1", users_message, text="done", final=True)
    await edits_.idle(5)
    assert sorted(str(c.response["error"]) for c in updates(slack)) == ["cant_update_message", "message_not_found"]
    assert edits_.stats.gone == 2


async def test_rejected_progress_is_dropped_but_a_rejected_final_is_retried(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler
) -> None:
    [ts] = await post(client)
    edits_ = await make_scheduler()
    slack.fail("chat.update", status=200, error="invalid_blocks", times=1)
    edits_.update("C1", ts, text="progress", blocks=[{"type": "bogus"}])
    await edits_.idle(5)
    assert (len(updates(slack)), edits_.stats.dropped_nonfinal, edits(slack, ts)) == (1, 1, [])

    slack.fail("chat.update", status=200, error="invalid_blocks", times=1)
    edits_.update("C1", ts, text="done", final=True)
    await edits_.idle(5)
    assert (len(updates(slack)), edits_.stats.retried, edits(slack, ts)) == (3, 1, ["done"])


async def test_finals_first_then_the_longest_waiting_message(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler
) -> None:
    blocker, a, b, c = await post(client, 4)
    edits_ = await make_scheduler(max_in_flight=1)
    release = slack.hold("chat.update")
    edits_.update("C1", blocker, text="x")
    await slack.wait_for(lambda: slack.pending)  # the worker is busy: the rest queue up
    edits_.update("C1", a, text="a1")
    edits_.update("C1", b, text="b1")
    edits_.update("C1", c, text="c done", final=True)
    edits_.update("C1", a, text="a2")  # newer text, but a keeps its place in line
    release.set()
    await edits_.idle(5)
    assert [(call.params["ts"], call.params["text"]) for call in updates(slack)] == [
        (blocker, "x"),
        (c, "c done"),
        (a, "a2"),
        (b, "b1"),
    ]


async def test_a_final_is_never_replaced_by_a_non_final(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler
) -> None:
    blocker, queued, in_flight = await post(client, 3)
    edits_ = await make_scheduler(max_in_flight=1)
    release = slack.hold("chat.update")
    edits_.update("C1", blocker, text="x")
    await slack.wait_for(lambda: slack.pending)
    edits_.update("C1", queued, text="done", final=True)
    edits_.update("C1", queued, text="late progress")  # the final is still queued
    release.set()
    await edits_.idle(5)

    release = slack.hold("chat.update")
    edits_.update("C1", in_flight, text="done", final=True)
    await slack.wait_for(lambda: slack.pending)
    edits_.update("C1", in_flight, text="late progress")  # the final is on the wire
    edits_.update("C1", queued, text="later progress")  # the final has landed
    release.set()
    await edits_.idle(5)
    assert (edits(slack, queued), edits(slack, in_flight)) == (["done"], ["done"])
    assert edits_.stats.dropped_nonfinal == 3

    edits_.update("C1", queued, text="done, amended", final=True)  # a newer final still wins
    await edits_.idle(5)
    assert edits(slack, queued) == ["done", "done, amended"]


async def test_the_whole_process_stays_within_the_bucket(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler
) -> None:
    per_minute, burst = 1200, 5  # 20/s: the bucket, not latency, sets the pace
    messages = await post(client, 50)
    edits_ = await make_scheduler(per_minute=per_minute, burst=burst, min_interval_s=0.05)
    for round_ in range(5):
        for i, ts in enumerate(messages):
            edits_.update("C1", ts, text=f"m{i} r{round_}", final=round_ == 4)
        if round_ < 4:
            needed = 3 * (round_ + 1)
            await slack.wait_for(lambda: len(updates(slack)) >= needed)  # noqa: B023 - awaited right here
    await edits_.idle(15)

    for i, ts in enumerate(messages):
        assert edits(slack, ts)[-1] == f"m{i} r4"
    times = sorted(c.time for c in updates(slack))
    busiest = max(sum(1 for t in times if start <= t < start + 1.0) for start in times)
    assert busiest <= burst + per_minute / 60
    assert edits_.stats.sent == len(times) >= 50 and slack.rate_limited["chat.update"] == 0


async def test_close_flushes_finals_and_drops_progress(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler
) -> None:
    blocker, final, progress = await post(client, 3)
    edits_ = await make_scheduler(max_in_flight=1)
    release = slack.hold("chat.update")
    edits_.update("C1", blocker, text="x")
    await slack.wait_for(lambda: slack.pending)
    edits_.update("C1", final, text="done", final=True)
    edits_.update("C1", progress, text="50%")
    closing = asyncio.create_task(edits_.close(timeout_s=5))
    await slack.wait_for(lambda: edits_.stats.dropped_nonfinal == 1)
    release.set()
    await closing
    assert (edits(slack, final), edits(slack, progress)) == (["done"], [])


async def test_close_gives_up_after_its_timeout(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    [ts] = await post(client)
    edits_ = await make_scheduler()
    slack.fail("chat.update", status=500, times=None)
    edits_.update("C1", ts, text="done", final=True)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="bot.slack.edits"):
        await edits_.close(timeout_s=0.3)
    assert time.monotonic() - started < 2
    assert "1 final message edits undelivered" in caplog.text and edits(slack, ts) == []


async def test_a_stalled_edit_holds_up_only_its_own_message(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler
) -> None:
    """Slack accepts the call and never answers: the other threads' edits keep flowing, the stalled one is retried."""
    stuck, *others = await post(client, 4)
    edits_ = await make_scheduler(call_timeout_s=0.5)
    slack.stall("chat.update", lambda params: params["ts"] == stuck)
    edits_.update("C1", stuck, text="stuck done", final=True)
    await slack.wait_for(lambda: slack.stalled, 5, "the stalled call")
    for i, ts in enumerate(others):
        edits_.update("C1", ts, text=f"other {i}", final=True)
    await slack.wait_for(lambda: all(edits(slack, ts) for ts in others), 5, "the other messages' edits")
    assert edits(slack, stuck) == [], "the others landed while the stalled call was still unanswered"
    await edits_.idle(5)
    assert edits(slack, stuck) == ["stuck done"]
    assert (edits_.stats.timed_out, edits_.stats.sent) == (1, 4)


async def test_slack_clients_have_a_bounded_timeout(slack: FakeSlack, make_settings: Callable[..., Settings]) -> None:
    """slack_sdk applies its timeout only to sessions it makes: a handed-in session must carry the bound."""
    settings = make_settings(slack_bot_token="xoxb-test", slack_api_url=slack.api_url)
    async with aiohttp.ClientSession() as unbounded:  # aiohttp's default: 300 s
        with pytest.raises(ValueError, match="timeout"):
            build_client(settings, unbounded)
    async with slack_http_session() as session:
        assert session.timeout.total == REQUEST_TIMEOUT_S
    async with slack_http_session(timeout_s=0.3) as session:
        client = build_client(settings, session)
        slack.stall("chat.postMessage")
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await client.chat_postMessage(channel="C1", text="hello?")
        assert time.monotonic() - started < 3 and len(slack.stalled) == 1


async def test_among_finals_the_oldest_final_goes_first(
    slack: FakeSlack, client: SlackClient, make_scheduler: MakeScheduler
) -> None:
    """A message that has shown progress for long must not jump ahead of a final that has waited longer."""
    blocker, early, late = await post(client, 3)
    edits_ = await make_scheduler(max_in_flight=1)
    release = slack.hold("chat.update")
    edits_.update("C1", blocker, text="x")
    await slack.wait_for(lambda: slack.pending)
    edits_.update("C1", late, text="late: progress")  # waiting since before either final
    edits_.update("C1", early, text="early: done", final=True)
    edits_.update("C1", late, text="late: done", final=True)
    release.set()
    await edits_.idle(5)
    assert [call.params["ts"] for call in updates(slack)][1:] == [early, late]


async def test_a_replica_spends_its_share_of_the_workspace_budget(client: SlackClient) -> None:
    clock = [100.0]
    edits_ = EditScheduler(client, per_minute=60, burst=1, clock=lambda: clock[0])
    edits_.share_budget(3)  # three live replicas: 20 a minute each
    bucket = edits_._bucket
    bucket.take(clock[0])
    assert bucket.wait_s(clock[0]) == pytest.approx(3.0)
    edits_.share_budget(1)  # alone again: the whole budget
    assert bucket.wait_s(clock[0]) == pytest.approx(1.0)
