"""Where the operator set each variable, and which `BOT_*` names they set that are no setting at all.

pydantic-settings silently ignores a name it does not know, so `BOT_MODLE=…` would leave the model
at its default with no word said; these warnings name the setting that was probably meant. Where a
value came from (environment or `.env`) is what a hint needs when a token is wrong: a value in the
environment wins over `.env`, so editing `.env` would change nothing.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection
from pathlib import Path

from dotenv import dotenv_values

PREFIX = "BOT_"
DOTENV = Path(".env")


def dotenv_names(path: Path = DOTENV) -> dict[str, str]:
    """The upper-cased names in `.env` (as pydantic-settings reads it: names are not case-sensitive)."""
    if not path.is_file():
        return {}
    return {name.upper(): name for name in dotenv_values(path)}


def source_of(name: str, path: Path = DOTENV) -> str | None:
    """`"the environment"`, `"<path>"` or None when the variable is set nowhere."""
    wanted = name.upper()
    if any(key.upper() == wanted for key in os.environ):
        return "the environment"
    if wanted in dotenv_names(path):
        return str(path)
    return None


def where_set(name: str, path: Path = DOTENV) -> str:
    """` (set in .env)` or ` (set in the environment, …)` to follow a variable's name; "" for a value from code."""
    source = source_of(name, path)
    if source is None:
        return ""
    if source == "the environment":
        return " (set in the environment, which wins over .env)"
    return f" (set in {source})"


def misspelt(known: Collection[str], path: Path = DOTENV) -> list[str]:
    """One warning per `BOT_*` name set in the environment or `.env` that is not in `known`."""
    known_upper = {name.upper() for name in known}
    found: dict[str, str] = {}
    for name in os.environ:
        found.setdefault(name.upper(), "the environment")
    for upper in dotenv_names(path):
        found.setdefault(upper, str(path))
    warnings = []
    for upper, where in sorted(found.items()):
        if not upper.startswith(PREFIX) or upper in known_upper:
            continue
        close = difflib.get_close_matches(upper, sorted(known_upper), n=1, cutoff=0.6)
        advice = f"did you mean {close[0]}?" if close else "no setting has a name like it"
        warnings.append(f"{upper} (set in {where}) is not a threadbot setting and is ignored; {advice}")
    return warnings
