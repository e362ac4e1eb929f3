"""The heartbeat: no model call without tasks or outside active hours; a forced decision call; a real turn on run."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from conftest import CoreFactory, RecordingOutput
from fakes.anthropic_api import Failure, FakeAnthropic, Reply, text, tool_use, user_texts
from schedule_support import FakeClock, schedule_core

from bot.agent.engine import RESTART_NOTICE
from bot.app import Core
from bot.config import ActiveHours, Settings
from bot.schedule.heartbeat import HEARTBEAT_OK, Action, Heartbeat, Outcome, decision_from, tasks_in
from bot.schedule.setup import HEARTBEAT_JOB_ID
from bot.types import ModelReply

MakeSettings = Callable[..., Settings]
TASKS = "# Heartbeat\n\n- Every morning: check that CI on main is green.\n"
MORNING = datetime(2026, 5, 1, 8, 30, tzinfo=UTC)  # 10:30 in Paris


def heartbeat_for(core: Core, clock: FakeClock, *, active_hours: str | None = None) -> Heartbeat:
    return Heartbeat(
        path=core.settings.bot_data_dir / "HEARTBEAT.md",
        channel="C0HEART",
        zone=core.settings.zone,
        active_hours=ActiveHours.parse(active_hours) if active_hours else None,
        provider=core.provider,
        store=core.store,
        engine=core.engine,
        clock=clock,
    )


def decide(action: str, *tasks: str) -> Reply:
    return Reply.tools(tool_use("heartbeat", {"action": action, "tasks": list(tasks)}))


@pytest.mark.parametrize(
    ("markdown", "has_tasks"),
    [
        ("", False),
        ("\n\n  \n", False),
        ("# Heartbeat\n\n## Daily\n", False),
        ("<!-- put tasks here -->\n# Tasks\n- \n- [ ]\n1.\n", False),
        ("<!--\nmulti-line\ncomment\n-->", False),
        ("<!-- unterminated comment", False),
        (TASKS, True),
        ("check the disk", True),
        ("# T\n<!-- c -->\n- [ ] renew the cert", True),
    ],
)
def test_tasks_in(markdown: str, has_tasks: bool) -> None:
    assert bool(tasks_in(markdown)) is has_tasks


@pytest.mark.parametrize(
    ("content", "action", "tasks"),
    [
        ([tool_use("heartbeat", {"action": "run", "tasks": ["a", " b ", ""]})], Action.RUN, ["a", "b"]),
        ([tool_use("heartbeat", {"action": "run", "tasks": "just one"})], Action.RUN, ["just one"]),
        ([tool_use("heartbeat", {"action": "run", "tasks": []})], Action.SKIP, []),  # run with nothing = skip
        ([tool_use("heartbeat", {"action": "skip", "tasks": ["a"]})], Action.SKIP, []),
        ([text("I think we should run")], Action.SKIP, []),  # no tool call: be quiet
    ],
)
def test_decision_from(content: list[dict[str, object]], action: Action, tasks: list[str]) -> None:
    decision = decision_from(ModelReply(content=content, stop_reason="tool_use"))
    assert (decision.action, decision.tasks) == (action, tasks)


@pytest.mark.parametrize("markdown", [None, "", "# Heartbeat\n<!-- nothing yet -->\n"])
async def test_no_tasks_means_no_model_call(
    fake: FakeAnthropic, settings: Settings, output: RecordingOutput, markdown: str | None
) -> None:
    if markdown is not None:
        (settings.bot_data_dir / "HEARTBEAT.md").write_text(markdown)
    async with schedule_core(fake, settings, output) as core:
        result = await heartbeat_for(core, FakeClock(MORNING)).tick()
    assert result.outcome is Outcome.NO_TASKS and fake.requests == []


async def test_skip_decision_posts_nothing(fake: FakeAnthropic, settings: Settings, output: RecordingOutput) -> None:
    (settings.bot_data_dir / "HEARTBEAT.md").write_text(TASKS)
    fake.script(decide("skip"))
    async with schedule_core(fake, settings, output) as core:
        result = await heartbeat_for(core, FakeClock(MORNING)).tick()
        assert await core.store.get_session("heartbeat:2026-05-01T08:30:00Z") is None
    assert result.outcome is Outcome.SKIPPED
    (request,) = fake.requests
    assert request["tool_choice"] == {"type": "tool", "name": "heartbeat"}
    assert [spec["name"] for spec in request["tools"]] == ["heartbeat"]
    assert "check that CI on main is green" in user_texts(request)[0]
    assert "Fri 2026-05-01 08:30 UTC" in user_texts(request)[0]
    assert output.events == [] and fake.rejections == []


async def test_run_decision_starts_a_turn_in_a_heartbeat_session(
    fake: FakeAnthropic, settings: Settings, output: RecordingOutput
) -> None:
    (settings.bot_data_dir / "HEARTBEAT.md").write_text(TASKS)
    fake.script(decide("run", "check that CI on main is green"), Reply.text_only("CI on main is red: 2 failing tests."))
    async with schedule_core(fake, settings, output) as core:
        result = await heartbeat_for(core, FakeClock(MORNING)).tick()
        assert result.outcome is Outcome.RAN and result.session_key == "heartbeat:2026-05-01T08:30:00Z"
        (outcome,) = await output.wait_turns(result.session_key, 1)
        session = await core.store.get_session(result.session_key)
    assert session is not None and session.address == {
        "edge": "slack",
        "channel": "C0HEART",
        "thread_ts": None,
        "quiet_reply": HEARTBEAT_OK,
    }
    assert outcome.text == "CI on main is red: 2 failing tests."
    turn_request = fake.requests[1]
    assert "tool_choice" not in turn_request and len(turn_request["tools"]) > 1  # a normal turn, all tools
    (prompt,) = user_texts(turn_request)
    assert prompt.startswith("[heartbeat] It is Fri 2026-05-01 08:30 UTC.")
    assert "- check that CI on main is green" in prompt and f"answer exactly {HEARTBEAT_OK}" in prompt


async def test_a_heartbeat_prompt_is_owed_input_until_its_turn_answers_it(
    fake: FakeAnthropic, settings: Settings, output: RecordingOutput
) -> None:
    """The prompt is stored as owed input before its turn starts, as a message is, in one process as in a
    cluster (where the job of its thread takes it up on whichever replica): a process that dies during the run
    resumes it; the turn's answer settles it."""
    (settings.bot_data_dir / "HEARTBEAT.md").write_text(TASKS)
    fake.script(decide("run", "check the queue"), Reply.text_only(HEARTBEAT_OK))
    async with schedule_core(fake, settings, output) as core:
        result = await heartbeat_for(core, FakeClock(MORNING)).tick()
        assert result.session_key is not None
        await output.wait_turns(result.session_key, 1)
        assert await core.store.session_inbox(result.session_key) == []  # answered
    with sqlite3.connect(settings.db_path) as db:
        [(rows,)] = db.execute("SELECT count(*) FROM inbox WHERE session_key = ?", (result.session_key,))
    assert rows == 1


async def test_a_heartbeat_cut_off_by_a_stop_runs_again_at_the_next_start(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    """A stop (or a kill) in the middle of a run leaves its prompt owed: the next start resumes it, as it resumes
    a message, in one process as on a cluster's other replica."""
    first = await core_factory()
    settings = first.settings
    (settings.bot_data_dir / "HEARTBEAT.md").write_text(TASKS)
    never = asyncio.Event()
    fake.script(decide("run", "check the queue"), Reply.text_only("halfway", hold=never))
    result = await heartbeat_for(first, FakeClock(MORNING)).tick()
    assert result.session_key is not None
    await fake.wait_for_requests(2)  # the run's turn is at its model call
    await core_factory.close(first)

    second = await core_factory(settings=settings)
    fake.script(Reply.text_only(HEARTBEAT_OK))
    before = len(output.finished(result.session_key))  # the turn the stop cut short may have reported its end
    assert await second.engine.resume() == [result.session_key]
    await output.wait_turns(result.session_key, before + 1)
    assert (result.session_key, RESTART_NOTICE) in output.notices
    assert "check the queue" in user_texts(fake.requests[-1])[0]
    assert await second.store.open_inbox() == {}


async def test_nothing_to_report_answers_heartbeat_ok(
    fake: FakeAnthropic, settings: Settings, output: RecordingOutput
) -> None:
    (settings.bot_data_dir / "HEARTBEAT.md").write_text(TASKS)
    fake.script(decide("run", "check CI"), Reply.text_only(HEARTBEAT_OK))
    async with schedule_core(fake, settings, output) as core:
        heartbeat = heartbeat_for(core, FakeClock(MORNING))
        result = await heartbeat.tick()
        assert result.session_key is not None
        (outcome,) = await output.wait_turns(result.session_key, 1)
        session = await core.store.get_session(result.session_key)
    # The edge compares the answer with the address's quiet_reply and posts nothing.
    assert outcome.text == HEARTBEAT_OK and session is not None and session.address["quiet_reply"] == HEARTBEAT_OK
    assert heartbeat.last_run_at == MORNING


@pytest.mark.parametrize(
    ("utc_hour", "outcome", "requests"),
    [(19, Outcome.OFF_HOURS, 0), (5, Outcome.OFF_HOURS, 0), (8, Outcome.SKIPPED, 1)],  # 21:00, 07:00, 10:00 Paris
)
async def test_active_hours_are_respected(
    fake: FakeAnthropic,
    make_settings: MakeSettings,
    output: RecordingOutput,
    utc_hour: int,
    outcome: Outcome,
    requests: int,
) -> None:
    settings = make_settings(bot_timezone="Europe/Paris")
    (settings.bot_data_dir / "HEARTBEAT.md").write_text(TASKS)
    fake.script(decide("skip"))
    async with schedule_core(fake, settings, output) as core:
        clock = FakeClock(datetime(2026, 5, 1, utc_hour, tzinfo=UTC))
        assert (await heartbeat_for(core, clock, active_hours="08:00-20:00").tick()).outcome is outcome
    assert len(fake.requests) == requests


async def test_the_interval_job_runs_when_enabled(
    fake: FakeAnthropic, make_settings: MakeSettings, output: RecordingOutput
) -> None:
    settings = make_settings(bot_heartbeat_interval_s=0.1, bot_heartbeat_channel="C0HEART")
    (settings.bot_data_dir / "HEARTBEAT.md").write_text(TASKS)
    fake.default = decide("skip")
    async with schedule_core(fake, settings, output) as core:
        assert core.scheduler.next_run_time(HEARTBEAT_JOB_ID) is not None
        (request, *_) = await fake.wait_for_requests(1)
    assert request["tool_choice"] == {"type": "tool", "name": "heartbeat"}


@pytest.mark.parametrize(
    "overrides",
    [{"bot_heartbeat_interval_s": 0, "bot_heartbeat_channel": "C0HEART"}, {"bot_heartbeat_interval_s": 60}],
)
async def test_no_job_when_off(
    fake: FakeAnthropic, make_settings: MakeSettings, output: RecordingOutput, overrides: dict[str, object]
) -> None:
    async with schedule_core(fake, make_settings(**overrides), output) as core:
        assert core.scheduler.next_run_time(HEARTBEAT_JOB_ID) is None


async def test_a_model_error_is_logged_not_raised(
    fake: FakeAnthropic, settings: Settings, output: RecordingOutput
) -> None:
    (settings.bot_data_dir / "HEARTBEAT.md").write_text(TASKS)
    fake.script(Failure(500, "api_error", "boom"))
    async with schedule_core(fake, settings, output) as core:
        assert (await heartbeat_for(core, FakeClock(MORNING)).tick()).outcome is Outcome.FAILED
