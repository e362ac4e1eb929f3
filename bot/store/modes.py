"""File modes for the data at rest: the data dir 0700 and every database file 0600, whatever the umask.

`bot.db` holds every conversation the bot had, DMs included; a umask of 022 (the usual default) would
leave it, its `-wal` and `-shm` and the data dir readable by every local user. So the store creates
them private and tightens them on every open, and `check` names any it finds looser (a file copied
in, a dir made by hand, an install from before this rule).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
DB_SUFFIXES = ("", "-wal", "-shm", ".lock")
"""`bot.db` and the files beside it: SQLite's write-ahead log and its index, and the one-engine lock."""


def private_dir(path: Path) -> None:
    """Create `path` (and missing parents) and make `path` itself 0700; parents are the operator's."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)


def private_file(path: Path) -> None:
    """Create `path` empty if it is missing, then make it 0600 (an existing file keeps its content)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE))
    os.chmod(path, FILE_MODE)


def database_files(db_path: Path) -> list[Path]:
    """The database's files that exist now."""
    return [path for suffix in DB_SUFFIXES if (path := db_path.with_name(db_path.name + suffix)).exists()]


def tighten(db_path: Path) -> None:
    """Make every existing database file 0600 (SQLite creates `-wal`/`-shm` with the main file's mode)."""
    for path in database_files(db_path):
        os.chmod(path, FILE_MODE)


def loose_modes(db_path: Path) -> list[str]:
    """One warning per database file or data dir that others than the owner may read or write."""
    found = []
    folder = db_path.parent
    if folder.is_dir() and stat.S_IMODE(folder.stat().st_mode) & 0o077:
        found.append(
            f"{folder} was mode {stat.S_IMODE(folder.stat().st_mode):o}, open to other users (it holds bot.db)"
        )
    for path in database_files(db_path):
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            found.append(f"{path} was mode {mode:o}, open to other users (it holds conversations)")
    return found
