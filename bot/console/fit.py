"""Fitting text to a terminal's width, measured in columns (an emoji takes two), not in characters.

A row the terminal wraps is a row the next repaint no longer accounts for: the live rows
under the output are cut to fit, and a streamed answer is broken into rows before it
reaches the edge, so every row the console draws is one screen row.
"""

from __future__ import annotations

from prompt_toolkit.utils import get_cwidth

ELLIPSIS = "…"
EMOJI_PRESENTATION = "\ufe0f"
"""After a symbol (⏸️) it asks for the two-column emoji form; prompt_toolkit counts it as nothing."""


def fit(text: str, columns: int) -> str:
    """`text` on one row of `columns`: cut with an ellipsis when longer, never wrapped.

    The last column stays free: writing into it makes some terminals wrap at once. The
    emoji-presentation selector is dropped, so the symbol takes the one column that
    prompt_toolkit reserves for it when it repaints the row.
    """
    text = text.replace(EMOJI_PRESENTATION, "")
    room = max(1, columns - 1)
    if get_cwidth(text) <= room:
        return text
    return text[: _fits(text, room - get_cwidth(ELLIPSIS))] + ELLIPSIS


def break_row(text: str, columns: int) -> tuple[str, str] | None:
    """Split a growing line into a full row and the rest, at the last space that fits; None while it fits."""
    room = max(1, columns - 1)
    end = _fits(text, room)
    if end == len(text):
        return None
    space = text.rfind(" ", 0, end + 1)
    cut = space if space > 0 else max(end, 1)
    return text[:cut].rstrip(" "), text[cut:].lstrip(" ")


def _fits(text: str, room: int) -> int:
    """How many leading characters of `text` take at most `room` columns (never a symbol without its selector)."""
    used = 0
    for index, char in enumerate(text):
        if char == EMOJI_PRESENTATION:
            used += 1  # the symbol before it is shown two columns wide
            if used > room:
                return max(0, index - 1)
            continue
        used += get_cwidth(char)
        if used > room:
            return index
    return len(text)
