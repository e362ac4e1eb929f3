"""Feedback buttons: 👍/👎 under every final answer, Slack's own feedback element.

The element is `feedback_buttons` in a `context_actions` block, and each button's value names the
rating and the turn that answered, so a click on it can be stored with that turn wherever and
whenever it comes (bot/slack/feedback_clicks.py).
"""

from __future__ import annotations

from typing import Any

from bot.slack.render import Block
from bot.store.feedback import Rating

FEEDBACK_ACTION = "answer_feedback"
MAX_VALUE_CHARS = 2000
"""Slack's limit on a feedback button's value."""


def feedback_block(turn_id: str) -> Block:
    """The buttons under a turn's answer; each value is the rating and the turn (`good <turn id>`)."""
    return {
        "type": "context_actions",
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": FEEDBACK_ACTION,
                "positive_button": _button("👍", Rating.GOOD, turn_id, "This answer was helpful"),
                "negative_button": _button("👎", Rating.BAD, turn_id, "This answer was not helpful"),
            }
        ],
    }


def _button(face: str, rating: Rating, turn_id: str, label: str) -> dict[str, Any]:
    value = f"{rating.value} {turn_id}"
    if len(value) > MAX_VALUE_CHARS:
        raise ValueError(f"a turn id of {len(turn_id)} characters does not fit a button's value")
    return {"text": {"type": "plain_text", "text": face}, "value": value, "accessibility_label": label}


def parse_value(value: str) -> tuple[Rating, str] | None:
    """The rating and turn a button's value names; None for a value this bot did not make."""
    rating, _, turn_id = value.partition(" ")
    if rating not in {member.value for member in Rating} or "#" not in turn_id:
        return None
    return Rating(rating), turn_id
