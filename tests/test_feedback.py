"""Feedback on answers: the buttons (validated by slack_sdk's own block models), the store's rows with the turn,
the model and who rated (on both back ends), and `threadbot usage --feedback`."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from fakes.anthropic_api import FakeAnthropic
from slack_sdk.models.blocks import Block, ContextActionsBlock, FeedbackButtonsElement
from test_console import bot_env, run_bot

from bot.clock import utcnow
from bot.slack.feedback import FEEDBACK_ACTION, feedback_block, parse_value
from bot.store import SqliteStore, Store
from bot.store.feedback import UNKNOWN_MODEL, FeedbackTally, Rating
from bot.types import Usage
from bot.usage_report import render_feedback

TURN = "slack:T1:C1:1700000000.000100#3"


def test_the_buttons_are_slacks_feedback_element_and_name_the_turn() -> None:
    [parsed] = Block.parse_all([feedback_block(TURN)])
    assert isinstance(parsed, ContextActionsBlock)
    parsed.validate_json()
    [element] = parsed.elements
    assert isinstance(element, FeedbackButtonsElement) and element.action_id == FEEDBACK_ACTION
    assert parse_value(element.positive_button.to_dict()["value"]) == (Rating.GOOD, TURN)
    assert parse_value(element.negative_button.to_dict()["value"]) == (Rating.BAD, TURN)
    assert parse_value("good") is None and parse_value("meh " + TURN) is None
    with pytest.raises(ValueError, match="does not fit"):
        feedback_block("x#" * 1000)


async def test_a_rating_is_kept_per_turn_and_person_with_the_turns_model(any_store: Store) -> None:
    store = any_store
    key = TURN.rpartition("#")[0]
    await store.record_usage(session_key=key, turn_id=TURN, model="claude-haiku-5-5", usage=Usage(1, 1, 0, 0))
    await store.record_usage(session_key=key, turn_id=TURN, model="claude-opus-5-5", usage=Usage(1, 1, 0, 0))
    first = await store.record_feedback(turn_id=TURN, session_key=key, user="U1", rating=Rating.GOOD)
    assert first == "claude-opus-5-5", "the turn's last model call wrote the answer"
    assert await store.record_feedback(turn_id=TURN, session_key=key, user="U1", rating=Rating.GOOD) is None
    assert await store.record_feedback(turn_id=TURN, session_key=key, user="U1", rating=Rating.BAD) is not None
    assert await store.record_feedback(turn_id=f"{key}#9", session_key=key, user="U2", rating=Rating.GOOD) == (
        UNKNOWN_MODEL
    )
    tallies = await store.feedback_by_model()
    assert tallies == [FeedbackTally("(unknown)", 1, 0), FeedbackTally("claude-opus-5-5", 0, 1)]
    recent = await store.recent_feedback()
    assert [(r.user, r.rating, r.turn_id) for r in recent] == [
        ("U2", Rating.GOOD, f"{key}#9"),
        ("U1", Rating.BAD, TURN),
    ]
    assert await store.feedback_by_model(since=utcnow() + timedelta(seconds=1)) == []


def test_the_report_shows_each_models_share_and_the_latest() -> None:
    text = render_feedback([FeedbackTally("m1", 3, 1)], [])
    lines = text.splitlines()
    assert lines[1].split() == ["m1", "3", "1", "75%"] and lines[2].split() == ["total", "3", "1", "75%"]
    assert lines[-1] == "no answers rated yet"


async def test_the_usage_command_prints_the_ratings(tmp_path: Path, fake: FakeAnthropic) -> None:
    env = bot_env(fake, tmp_path)
    store = await SqliteStore.open(tmp_path / "bot.db")  # BOT_DATA_DIR
    try:
        await store.record_usage(session_key="s", turn_id="s#1", model="claude-sonnet-5-5", usage=Usage(1, 1, 0, 0))
        await store.record_feedback(turn_id="s#1", session_key="s", user="U7", rating=Rating.BAD)
    finally:
        await store.close()
    code, out, err = await run_bot("usage", "--feedback", env=env, cwd=tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].split() == ["claude-sonnet-5-5", "0", "1", "0%"]
    assert lines[-1].split()[2:] == ["👎", "U7", "claude-sonnet-5-5", "s#1"]
