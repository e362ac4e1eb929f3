"""Property-based tests (hypothesis) for tool-argument validation, cut-off JSON included.

Two gates stand between a model's tool call and its run: the stream reader refuses a call whose JSON
was not streamed to the end, and the toolbox refuses arguments that break the tool's schema. The
first matters because the SDK parses cut-off JSON in partial mode: `{"seconds": 1` of
`{"seconds": 10}` reads as a valid `{"seconds": 1}`, which the schema gate would let through.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.agent.toolbox import Toolbox
from bot.model.stream_reader import ToolInputs
from tools import builtin_tools
from tools.sandbox import ShellPolicy
from tools.sleep_for import MAX_SLEEP_S

TOOLBOX = Toolbox(builtin_tools(shell=ShellPolicy()))
NAMES = TOOLBOX.names
CALL_ID = "toolu_prop"

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=12
)
json_objects = st.dictionaries(st.text(), json_values, max_size=5)
tool_inputs = st.dictionaries(st.text(min_size=1), scalars, min_size=1, max_size=4)


@settings(max_examples=300)
@given(name=st.sampled_from(NAMES), args=json_values)
def test_any_value_gets_an_answer_never_an_exception(name: str, args: Any) -> None:
    problem = TOOLBOX.problem(name, args)
    assert problem is None or isinstance(problem, str)
    if not isinstance(args, dict):
        assert problem == "arguments must be a JSON object"


@given(name=st.sampled_from(NAMES), args=json_objects, extra=st.text(min_size=1))
def test_an_argument_the_schema_does_not_know_is_refused(name: str, args: dict[str, Any], extra: str) -> None:
    tool = TOOLBOX.get(name)
    assert tool is not None
    known = set(tool.input_schema["properties"])
    if extra in known:
        return
    problem = TOOLBOX.problem(name, {**args, extra: 1})
    assert problem is not None and problem.startswith(f"invalid arguments for {name}:")


@given(seconds=st.floats(min_value=0, max_value=MAX_SLEEP_S) | st.integers(min_value=0, max_value=MAX_SLEEP_S))
def test_valid_sleep_for_arguments_pass(seconds: float) -> None:
    assert TOOLBOX.problem("sleep_for", {"seconds": seconds}) is None


@given(
    seconds=st.floats(max_value=-1e-9) | st.floats(min_value=MAX_SLEEP_S + 1) | st.text() | st.none() | st.booleans()
)
def test_invalid_sleep_for_arguments_are_refused(seconds: Any) -> None:
    problem = TOOLBOX.problem("sleep_for", {"seconds": seconds})
    assert problem is not None and "invalid arguments for sleep_for" in problem and "(at seconds)" in problem


@given(name=st.sampled_from(NAMES))
def test_an_unknown_tool_is_named_with_the_tools_there_are(name: str) -> None:
    problem = TOOLBOX.problem(name + "_nope", {})
    assert problem is not None and problem.startswith(f"unknown tool {name + '_nope'!r}") and name in problem


# --- cut-off JSON -----------------------------------------------------------------------------------


def _stream(raw: str, cuts: list[int], *, closed: bool) -> ToolInputs:
    """Feed `raw` as input_json deltas split at `cuts`, the way the stream hands them over."""
    inputs = ToolInputs()
    inputs.start(0, {"type": "tool_use", "id": CALL_ID, "name": "sleep_for", "input": {}})
    bounds = [0, *sorted(set(cuts)), len(raw)]
    for start, end in itertools.pairwise(bounds):
        inputs.add(0, raw[start:end])
    if closed:
        inputs.close(0)
    return inputs


@settings(max_examples=300)
@given(args=tool_inputs, data=st.data())
def test_every_cut_of_the_json_is_incomplete(args: dict[str, Any], data: st.DataObject) -> None:
    raw = json.dumps(args)
    keep = data.draw(st.integers(min_value=0, max_value=len(raw) - 1), label="keep")
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=keep), max_size=4), label="cuts")
    cut = raw[:keep]
    # Even when the block is closed properly (the output limit ends a message cleanly), a cut is a cut;
    # only a closed block with no input at all is whole: its input is the `{}` the model started with.
    assert _stream(cut, cuts, closed=True).incomplete() == {CALL_ID} or not cut.strip()
    assert _stream(cut, cuts, closed=False).incomplete() == {CALL_ID}


@given(args=tool_inputs, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=6))
def test_whole_json_in_any_chunks_is_complete(args: dict[str, Any], cuts: list[int]) -> None:
    raw = json.dumps(args)
    assert _stream(raw, [c for c in cuts if c <= len(raw)], closed=True).incomplete() == frozenset()


@given(args=tool_inputs, data=st.data())
def test_a_call_goes_back_with_its_whole_input_or_an_empty_one(args: dict[str, Any], data: st.DataObject) -> None:
    raw = json.dumps(args)
    assert _stream(raw, [], closed=True).inputs() == {0: args}
    keep = data.draw(st.integers(min_value=1, max_value=len(raw) - 1), label="keep")
    # A cut never goes back as the part that arrived: the history shows a refused call with no arguments.
    assert _stream(raw[:keep], [], closed=True).inputs() == {0: {}}
    assert _stream(raw, [], closed=False).inputs() == {0: {}}


@given(seconds=st.integers(min_value=10, max_value=MAX_SLEEP_S))
def test_a_cut_number_can_pass_the_schema_which_is_why_cuts_never_run(seconds: int) -> None:
    raw = json.dumps({"seconds": seconds})
    cut = raw[:-2]  # one digit and the brace lost: `{"seconds": 1` of `{"seconds": 10}`
    # The SDK's partial parse of `cut` (pinned in test_fake_anthropic) passes the schema: it alone would run it.
    assert TOOLBOX.problem("sleep_for", {"seconds": seconds // 10}) is None
    assert _stream(cut, [], closed=True).incomplete() == {CALL_ID}
