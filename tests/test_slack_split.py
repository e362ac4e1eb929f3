"""Splitting long answers into Slack messages: sizes, boundaries, fences, and no text lost."""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.slack import reply
from bot.slack.render import Block
from bot.slack.split import (
    MESSAGE_LIMIT,
    REOPEN_MAX_CHARS,
    close_open_fence,
    is_fence,
    open_fence,
    split_chunks,
    split_text,
)


def normalised(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def without_reopened_fences(chunks: list[str]) -> str:
    """Join chunks, removing the fence lines the splitter added (a close at a cut, its reopening after)."""
    pieces = []
    for index, chunk in enumerate(chunks):
        lines = chunk.split("\n")
        if index > 0 and open_fence(chunks[index - 1]) is None and _cut_inside(chunks[index - 1]):
            lines = lines[1:]
        if index + 1 < len(chunks) and _cut_inside(chunk):
            lines = lines[:-1]
        pieces.append("\n".join(lines))
    return " ".join(pieces)


def assert_rejoins(chunks: list[str], text: str) -> None:
    """The chunks are the text in order, with only whitespace between them (what a cut may drop), once fence
    lines are left out of both (the splitter closes and reopens a fence it cuts)."""

    def unfenced(part: str) -> str:
        return "\n".join(line for line in part.split("\n") if not is_fence(line))

    whole, position = unfenced(text), 0
    for index, chunk in enumerate(chunks):
        body = unfenced(chunk).strip()
        found = whole.find(body, position)
        assert found >= 0 and not whole[position:found].strip(), f"part {index} is not the text that follows"
        position = found + len(body)
    assert not whole[position:].strip(), "text left out after the last part"


def _cut_inside(chunk: str) -> bool:
    """A chunk the splitter closed artificially: its last line closes a fence it reopened or opened."""
    return chunk.endswith("\n```") and open_fence(chunk.removesuffix("\n```")) is not None


def paragraphs(count: int, words: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    return "\n\n".join(" ".join(f"w{rng.randint(0, 999)}" for _ in range(rng.randint(1, words))) for _ in range(count))


def test_short_text_is_one_chunk() -> None:
    assert split_text("hello") == ["hello"]
    assert split_text("") == []
    assert split_text("x" * MESSAGE_LIMIT) == ["x" * MESSAGE_LIMIT]


@pytest.mark.parametrize("seed", range(5))
def test_prose_splits_at_paragraphs_within_the_limit(seed: int) -> None:
    text = paragraphs(80, 120, seed)
    chunks = split_text(text, 1_000)
    assert len(chunks) > 5
    assert all(0 < len(chunk) <= 1_000 for chunk in chunks)
    assert normalised(" ".join(chunks)) == normalised(text)
    # Every cut is at a paragraph break, unless the paragraph alone was too long: then at a space.
    for chunk in chunks[:-1]:
        assert text.find(chunk + "\n\n") >= 0 or len(chunk) > 500


def test_prefers_a_paragraph_break_that_keeps_the_chunk_half_full() -> None:
    text = "a" * 300 + "\n\n" + "b " * 200 + "\n" + "c " * 300
    chunks = split_text(text, 1_000)
    assert chunks[0] == "a" * 300 + "\n\n" + ("b " * 200).rstrip()
    assert normalised(" ".join(chunks)) == normalised(text)


def test_never_cuts_inside_a_fence_that_fits_in_a_message() -> None:
    code = "```python\n" + "\n".join(f"x = {i}" for i in range(60)) + "\n```"
    text = "intro " * 120 + "\n\n" + code + "\n\nafter the code"
    chunks = split_text(text, 1_000)
    assert any(code in chunk for chunk in chunks), "the code block stays whole"
    assert all(chunk.count("```") % 2 == 0 for chunk in chunks)
    assert normalised(" ".join(chunks)) == normalised(text)


def test_a_fence_longer_than_a_message_is_closed_and_reopened() -> None:
    code = "```sql\n" + "\n".join(f"SELECT {i} FROM t;  -- row" for i in range(200)) + "\n```"
    text = "Here it is:\n\n" + code + "\n\nDone."
    chunks = split_text(text, 800)
    assert all(len(chunk) <= 800 for chunk in chunks)
    assert all(open_fence(chunk) is None for chunk in chunks), "every chunk renders as balanced Markdown"
    inner = [chunk for chunk in chunks if "SELECT" in chunk]
    assert len(inner) > 3
    assert all(chunk.startswith("```sql\n") for chunk in inner), "each part reopens the fence with its language"
    assert normalised(without_reopened_fences(chunks)) == normalised(text)


def test_one_enormous_line_is_cut_hard() -> None:
    text = "x" * 2_500
    chunks = split_text(text, 1_000)
    assert [len(chunk) for chunk in chunks] == [996, 996, 508]
    assert "".join(chunks) == text


def test_the_split_of_a_prefix_is_stable_as_text_grows() -> None:
    """What makes streaming work: chunks that are no longer last never change again."""
    text = paragraphs(60, 80, seed=7) + "\n\n```\n" + "\n".join(f"line {i}" for i in range(300)) + "\n```\nend"
    sealed: list[str] = []
    for end in range(0, len(text) + 1, 97):
        chunks = split_text(text[:end], 1_000)
        assert chunks[: len(sealed)] == sealed, f"a sealed chunk changed at length {end}"
        sealed = chunks[:-1]


def test_fence_helpers() -> None:
    assert is_fence("```") and is_fence("   ```js") and not is_fence("    ```") and not is_fence("x ```")
    assert open_fence("a\n```py\nb") == "```py"
    assert open_fence("```\nb\n```") is None
    assert close_open_fence("```\ncode") == "```\ncode\n```"
    assert close_open_fence("done") == "done"


def test_tiny_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        split_text("x" * 100, 10)


class NowhereThread:
    """An answer's thread that never runs what is queued: only the split is under test."""

    def enqueue(self, operation: Callable[[], Awaitable[None]]) -> None:
        pass

    async def post(self, text: str, blocks: list[Block], owed: bool) -> tuple[str, str] | None:
        return None

    def edit(self, channel: str, ts: str, text: str, blocks: list[Block], final: bool) -> None:
        pass

    def quiet_word(self) -> str | None:
        return None

    def outcomes(self) -> Block | None:
        return None

    async def upload(self, text: str, continued: bool) -> bool:
        return False


def test_a_streamed_answer_is_split_again_only_when_it_crosses_into_a_new_part(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Splitting the whole text on every delta made a long answer quadratic; the kept split must still be exact."""
    splits: list[int] = []

    def counting_split(text: str) -> list[str]:
        splits.append(len(text))
        return split_chunks(text)

    monkeypatch.setattr(reply, "split_chunks", counting_split)
    stream = reply.ReplyStream(NowhereThread())
    code = "```sql\n" + "\n".join(f"SELECT {i} FROM t;" for i in range(400)) + "\n```\n\n"
    text = paragraphs(150, 120, seed=3) + "\n\n" + code + paragraphs(40, 80, seed=4)
    rng = random.Random(5)
    position = 0
    while position < len(text):
        step = rng.randint(1, 40)
        stream.add(text[position : position + step])
        position += step
        if rng.random() < 0.02:
            assert stream._chunks == split_text(stream.text)
    assert stream._chunks == split_text(text)
    assert len(text) > 60_000 and len(stream._chunks) > 15
    assert len(splits) <= 3 * len(stream._chunks), f"{len(splits)} splits for {len(stream._chunks)} parts"


def test_blank_lines_at_a_cut_never_make_an_empty_part() -> None:
    """The case found in a real run: a paragraph cut followed by a whitespace-only line gave a part of length 0."""
    text = "intro " * 420 + "\n\n   \n" + "y" * 5000
    chunks = split_text(text)
    assert all(chunk.strip() for chunk in chunks), [len(chunk) for chunk in chunks]
    assert_rejoins(chunks, text)


# Text made of the pieces that matter to the splitter: words, spaces, line and paragraph breaks, blank lines
# of spaces, fences (with and without an info string) and lines too long to fit a message.
_PIECES = st.sampled_from(
    ["word ", "intro ", " ", "   ", "\n", "\n\n", "\n   \n", "```", "```py", "\n```\n", "y" * 60, "`", "\t"]
)
_TEXTS = (
    st.lists(_PIECES, max_size=120)
    .map("".join)
    # An info string longer than a reopened fence keeps is out of scope: its tail would move into the code.
    .filter(lambda text: all(len(line.strip()) <= REOPEN_MAX_CHARS for line in text.split("\n") if is_fence(line)))
)
_LIMITS = st.integers(min_value=40, max_value=400)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXTS, limit=_LIMITS)
def test_any_text_splits_into_non_empty_parts_within_the_limit_that_rejoin(text: str, limit: int) -> None:
    chunks = split_text(text, limit)
    assert all(chunk.strip() for chunk in chunks), "a part with nothing in it"
    assert all(len(chunk) <= limit for chunk in chunks)
    for chunk in chunks[:-1]:
        assert open_fence(chunk) is None, f"unbalanced fence in {chunk!r}"
    if chunks:
        assert (open_fence(chunks[-1]) is None) == (open_fence(text) is None)
    assert_rejoins(chunks, text)


@settings(max_examples=200, deadline=None)
@given(text=_TEXTS, limit=_LIMITS, data=st.data())
def test_any_prefix_splits_into_a_prefix_of_the_split(text: str, limit: int, data: st.DataObject) -> None:
    """What streaming relies on, blank chunks included: only the last chunk of a prefix can still change."""
    end = data.draw(st.integers(min_value=0, max_value=len(text)))
    shorter, longer = split_chunks(text[:end], limit), split_chunks(text, limit)
    assert longer[: max(0, len(shorter) - 1)] == shorter[:-1]
    visible_shorter = split_text(text[:end], limit)
    assert split_text(text, limit)[: max(0, len(visible_shorter) - 1)] == visible_shorter[:-1]


@settings(max_examples=100, deadline=None)
@given(pieces=st.lists(_PIECES, max_size=400))
def test_a_streamed_answer_keeps_exactly_the_split_of_its_text(pieces: list[str]) -> None:
    stream = reply.ReplyStream(NowhereThread())
    for piece in pieces:
        stream.add(piece)
    assert stream._chunks == split_text(stream.text)
