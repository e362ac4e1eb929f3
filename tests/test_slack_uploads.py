"""The text beside an uploaded answer: a short preview that never cuts a code block open."""

from __future__ import annotations

from bot.slack.uploads import answer_comment, preview


def test_a_short_text_is_its_own_preview() -> None:
    assert preview("short answer") == "short answer"


def test_a_preview_ends_at_a_paragraph_when_one_is_near() -> None:
    text = "First paragraph. " * 20 + "\n\n" + "Second paragraph. " * 40
    cut = preview(text, limit=500)
    assert cut == ("First paragraph. " * 20).rstrip() + " …"


def test_a_preview_never_leaves_a_code_fence_open() -> None:
    text = "Intro line\n" * 30 + "```python\n" + "print(1)\n" * 100 + "```\n"
    cut = preview(text, limit=500)
    assert cut.count("```") == 0 and cut.startswith("Intro line") and cut.endswith(" …")


def test_the_comment_says_where_the_whole_answer_is() -> None:
    text = "word " * 5_000
    assert answer_comment(text, continued=False).endswith(
        "📎 The whole answer (25,000 characters) is in the attached file."
    )
    assert answer_comment(text, continued=True) == (
        "📎 The answer goes on; the whole of it (25,000 characters) is in the attached file."
    )
