"""Text that can always be encoded: lone surrogates replaced at the edges, before anything stores or sends it.

Python strings can hold code points UTF-8 cannot carry: a lone surrogate from a
JSON `\\ud800` escape (Slack passes them through), or the `surrogateescape`
stand-ins for undecodable bytes in a terminal's input, in `argv` or in a file
name. Such a string fails only later, far from its cause (the store, or the
model request refusing to encode). Each edge replaces them with U+FFFD, the
usual mark of a character that could not be read, so the turn goes on.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """`text` with every surrogate code point replaced by U+FFFD (paired ones cannot occur in a `str` here)."""
    if text.isascii():
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


def clean_json(value: Any) -> Any:
    """`clean_text` applied to every string in a JSON-like value: keys, items and nested values."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_json(key): clean_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(item) for item in value]
    return value
