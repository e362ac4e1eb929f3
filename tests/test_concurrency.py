"""The shared async helpers: one task set, one backoff rule, one token bucket."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bot.concurrency import NotAccepting, TaskSet, TokenBucket, backoff_s


@pytest.mark.parametrize(
    ("attempt", "jitter", "expected"),
    [
        (1, 0.0, 0.5),
        (2, 0.0, 1.0),
        (4, 0.0, 4.0),
        (6, 0.0, 10.0),  # 16 s, capped
        (10_000, 0.0, 10.0),  # no overflow however long it has failed
        (0, 0.0, 0.5),  # a caller counting from 0 still gets the first delay
        (1, 0.999, pytest.approx(0.5 * 1.24975)),
        (6, 0.5, 11.25),  # the jitter stretches even the ceiling, so capped retries spread too
    ],
)
def test_backoff_doubles_to_a_ceiling(attempt: int, jitter: float, expected: float) -> None:
    assert backoff_s(attempt, first_s=0.5, max_s=10.0, jitter=jitter) == expected


def test_token_bucket_with_a_manual_clock() -> None:
    bucket = TokenBucket(rate=2.0, capacity=3, now=100.0)
    for _ in range(3):
        assert bucket.wait_s(100.0) == 0
        bucket.take(100.0)
    assert bucket.wait_s(100.0) == pytest.approx(0.5)
    assert bucket.wait_s(100.25) == pytest.approx(0.25)
    assert bucket.wait_s(110.0) == 0 and bucket.tokens == 3  # refills to capacity, no more
    bucket.drain(110.0)
    assert bucket.wait_s(110.0) == pytest.approx(0.5)
    bucket.take(110.5)  # sent at 110.5, answered at 111: the other side may have counted it at 111
    bucket.forgo(111.0)
    assert bucket.wait_s(111.0) == pytest.approx(0.5), "no refill for the time the call was on the wire"


def test_a_token_bucket_takes_without_waiting_or_says_no() -> None:
    bucket = TokenBucket(rate=1.0, capacity=1, now=0.0)
    assert bucket.try_take(0.0)
    assert not bucket.try_take(0.5) and bucket.tokens == pytest.approx(0.5), "nothing taken when there is none"
    assert bucket.try_take(1.0)


def test_a_token_bucket_pauses_and_shares() -> None:
    bucket = TokenBucket(rate=1.0, capacity=2, now=0.0)
    bucket.pause(0.0, 5.0)
    assert bucket.wait_s(1.0) == pytest.approx(4.0) and not bucket.try_take(1.0), "paused: no token though two saved"
    bucket.pause(1.0, 1.0)
    assert bucket.wait_s(1.0) == pytest.approx(4.0), "a shorter pause does not cut a longer one short"
    assert bucket.try_take(5.0) and bucket.tokens == 1, "the pause spent nothing"
    bucket.rate_limited(5.0, 2.0)
    assert bucket.tokens == 0 and bucket.wait_s(5.0) == pytest.approx(2.0), "a 429 pauses and drains"
    bucket.share(4)
    assert bucket.rate == 0.25
    bucket.share(1)
    assert bucket.rate == 1.0


async def test_a_failure_is_logged_once_with_the_tasks_name(caplog: pytest.LogCaptureFixture) -> None:
    tasks = TaskSet()

    async def boom() -> None:
        raise ValueError("it broke")

    task = tasks.spawn(boom(), "the boom job")
    assert task is not None
    await asyncio.wait({task})  # the set's own done callback was added first, so it has run
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failures] == ["the boom job failed"]
    assert failures[0].exc_info is not None and isinstance(failures[0].exc_info[1], ValueError)
    assert len(tasks) == 0


async def test_close_lets_work_finish_within_the_bound_and_cancels_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    tasks = TaskSet()
    quick_done = asyncio.Event()
    slow_cancelled = asyncio.Event()
    release_quick = asyncio.Event()

    async def quick() -> None:
        await release_quick.wait()
        quick_done.set()

    async def slow() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            slow_cancelled.set()
            raise

    tasks.spawn(quick(), "quick")
    tasks.spawn(slow(), "slow")
    release_quick.set()
    await tasks.close(timeout_s=0.2)
    assert quick_done.is_set() and slow_cancelled.is_set()
    assert len(tasks) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "a cancel at shutdown is no failure"


async def test_close_without_a_bound_cancels_at_once() -> None:
    tasks = TaskSet()
    task = tasks.spawn(asyncio.Event().wait(), "waits forever")
    assert task is not None
    await tasks.close()
    assert task.cancelled()


async def test_a_closed_set_starts_nothing() -> None:
    tasks = TaskSet()
    await tasks.close()
    ran = False

    async def work() -> None:
        nonlocal ran
        ran = True

    assert tasks.spawn(work(), "late") is None  # closed unrun: no "never awaited" warning either
    with pytest.raises(NotAccepting):
        await tasks.run(work(), "late too")
    assert not ran


async def test_run_raises_what_the_task_raised_and_is_not_logged_too(caplog: pytest.LogCaptureFixture) -> None:
    tasks = TaskSet()

    async def boom() -> None:
        raise KeyError("k")

    with pytest.raises(KeyError):
        await tasks.run(boom(), "boom")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "its caller reports it: logged once"


@pytest.mark.parametrize("fails", [False, True])
async def test_run_outlives_a_cancelled_caller(fails: bool, caplog: pytest.LogCaptureFixture) -> None:
    """The caller gave up waiting: the work goes on, and a failure, with nobody to hear it, is logged."""
    tasks = TaskSet()
    release = asyncio.Event()
    finished = asyncio.Event()

    async def work() -> None:
        await release.wait()
        finished.set()
        if fails:
            raise KeyError("late")

    caller = asyncio.create_task(tasks.run(work(), "work"))
    await asyncio.sleep(0)  # a yield, not a wait: run() starts the work and awaits it
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    release.set()
    await asyncio.wait_for(finished.wait(), 5)
    await tasks.close(timeout_s=5)
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert failures == (["work failed"] if fails else [])
