"""`ask_user`: the model asks the person it works for a question and carries on while they think.

The call is a background call like any other, but it waits for a person before it runs,
as a call the tool policy asks an approver about does: the daemon shows the question (with
the options as buttons, or waiting for a reply when there are none), keeps it waiting across
restarts, and runs this tool with the answer once someone who may answer has given it. So
all this module does is turn that answer into the call's result; nobody answering in time is
a timeout the registry reports.
"""

from __future__ import annotations

from typing import Any

from tools.base import ToolContext, ToolError, ToolKind, tool

MAX_OPTIONS = 10
OPTION_MAX_CHARS = 75
"""A Slack button's label holds 75 characters; an option is a button."""
QUESTION_MAX_CHARS = 2_000
MAX_WAIT_S = 7 * 24 * 3600


@tool(
    "ask_user",
    "Ask the person you work for a question and go on without waiting: the answer arrives later as this call's "
    "result. With options they pick one (buttons); without, their next reply in the conversation is the answer. "
    "Use it when you need a decision or a fact only they have; the call shows as awaiting_answer until then, "
    "and fails with a timeout when nobody answers within timeout_seconds.",
    {
        "question": {"type": "string", "minLength": 1, "maxLength": QUESTION_MAX_CHARS},
        "options": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": OPTION_MAX_CHARS},
            "minItems": 1,
            "maxItems": MAX_OPTIONS,
            "uniqueItems": True,
            "description": "Choices to offer as buttons; leave out for a free-text answer.",
        },
        "timeout_seconds": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": MAX_WAIT_S,
            "description": "How long the person has to answer (default: the daemon's approval timeout).",
        },
    },
    required=("question",),
    uses_slot=False,
    kind=ToolKind.IO,
)
async def ask_user(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    if ctx.answer is None:
        raise ToolError("this question has no answer (it ran without asking anyone)")
    return {"question": args["question"], "answer": ctx.answer.text, "answered_by": ctx.answer.by}
