"""Cutting a long answer into Slack-sized messages without breaking its Markdown.

Slack truncates long messages and renders a code block cut in half as garbage, so
an answer is split greedily into chunks of at most `limit` characters: at the last
paragraph break that keeps a chunk at least half full, else at a line break or a
space, never inside a code fence. Only a single fence longer than a message is cut inside; that
chunk closes the fence and the next one reopens it with the same info string.
The split of a text's prefix never changes as the text grows, which is what lets
a streamed answer seal its first messages while the rest is still arriving.

Whitespace at a cut is dropped, so a stretch of blank lines there would leave a
chunk with nothing in it: Slack refuses such a message (empty `text`, empty
block). `split_chunks` keeps those blank chunks, so that it stays stable as the
text grows (a blank last chunk can still fill up); `split_text` leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass

MESSAGE_LIMIT = 3_900
"""Slack asks for messages under 4,000 characters; this leaves room for a closing fence."""

FENCE = "```"
_CLOSE = "\n" + FENCE
REOPEN_MAX_CHARS = 20
"""A fence reopened in the next chunk keeps its info string (the language) up to this length; a longer one
would eat the chunk's room, so it reopens bare."""


@dataclass(frozen=True, slots=True)
class _Breaks:
    """Candidate cut positions (offsets into the text) found in a window, by kind."""

    paragraph: int = 0  # end of a line followed by a blank line, outside fences
    line: int = 0  # end of a line, outside fences
    in_fence: int = 0  # end of a line inside a fence (needs close/reopen)
    space: int = 0  # a space outside fences


def is_fence(line: str) -> bool:
    """A fence line: up to three spaces, then three backticks."""
    stripped = line.lstrip(" ")
    return len(line) - len(stripped) <= 3 and stripped.startswith(FENCE)


def open_fence(text: str, opened: str | None = None) -> str | None:
    """The info line of the fence still open at the end of `text` (None when balanced)."""
    for line in text.split("\n"):
        if is_fence(line):
            opened = None if opened is not None else line.strip()
    return opened


def close_open_fence(text: str) -> str:
    """`text` with an unclosed fence closed, for showing a partial (still streaming) answer."""
    return text + _CLOSE if open_fence(text) is not None else text


def _scan(text: str, window: int, opened: str | None) -> _Breaks:
    """Walk the lines of `text[:window]` tracking fences, remembering the last cut of each kind."""
    paragraph = line_break = in_fence = space = 0
    pos = 0
    lines = text.split("\n")
    for index, line in enumerate(lines):
        end = pos + len(line)
        if end > window:
            if opened is None:
                cut = line.rfind(" ", 0, window - pos)
                while cut > 0 and is_fence(line[cut + 1 :]):
                    cut = line.rfind(" ", 0, cut)
                space = pos + cut if cut > 0 else space
            break
        if is_fence(line):
            opened = None if opened is not None else line.strip()
        if index + 1 < len(lines) and end > 0:
            if opened is None:
                line_break = end
                if not lines[index + 1].strip():
                    paragraph = end
            elif not is_fence(line):
                in_fence = end
        pos = end + 1
    return _Breaks(paragraph, line_break, in_fence, space)


def _choose(breaks: _Breaks, limit: int) -> int:
    """Pick a cut offset; 0 when there is no good place at all."""
    half = limit // 2
    if breaks.paragraph >= half:
        return breaks.paragraph
    if breaks.line >= half:
        return breaks.line
    if breaks.space >= half:
        return breaks.space  # mid-paragraph, but outside any fence
    if breaks.line > 0:
        return breaks.line  # a short chunk rather than a cut fence
    return breaks.in_fence or breaks.space


def _hard_cut(text: str, room: int) -> int:
    """Where to cut one enormous line: as late as fits, but not where the rest would begin like a fence (it begins
    a message, so Slack would read it as one)."""
    cut = room
    while cut > 1 and is_fence(text[cut:]):
        cut -= 1
    return cut


def _reopening(info_line: str) -> str:
    return info_line if len(info_line) <= REOPEN_MAX_CHARS else FENCE


def split_text(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split `text` into chunks of at most `limit` characters, none of them blank; loses no text but whitespace."""
    return visible(split_chunks(text, limit))


def visible(chunks: list[str]) -> list[str]:
    """The chunks worth a message: all but the blank ones."""
    return [chunk for chunk in chunks if chunk.strip()]


def split_chunks(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """`split_text` with its blank chunks left in, so the split of a prefix is a prefix of the split."""
    if limit < 40:
        raise ValueError("limit too small to hold a reopened fence")
    chunks: list[str] = []
    rest = text
    reopen: str | None = None  # info line of a fence cut at the previous chunk's end
    while rest:
        head = _reopening(reopen) + "\n" if reopen is not None else ""
        if len(head) + len(rest) <= limit:
            chunks.append(head + rest)
            break
        room = limit - len(head) - len(_CLOSE)
        breaks = _scan(rest, room, reopen)
        cut = _choose(breaks, limit - len(head)) or _hard_cut(rest, room)
        piece, rest = rest[:cut], rest[cut:]
        reopen = open_fence(piece, reopen)
        if reopen is not None:
            chunks.append(head + piece + _CLOSE)
            rest = rest.removeprefix("\n")
        else:
            chunks.append(head + piece.rstrip())
            rest = rest[1:] if cut == breaks.space else rest.lstrip("\n")
    return chunks
