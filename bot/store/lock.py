"""One engine per SQLite file: an exclusive advisory lock on `bot.db.lock`, held while a core is open.

Two processes opening a core on the same file would each orphan the other's running calls at start, fire
every reminder twice and interleave turns of one thread; SQLite itself would let them. So whatever opens
a core (`run`, `console`, `oneshot`) takes this lock first, and a second one is refused with one line
naming the data dir and the holder's pid. `check` and `usage` only read and migrate, which SQLite already
serialises, so they work beside a running daemon.

`flock` rather than a pid file: the kernel drops the lock when the process dies, even by SIGKILL, so a
crash never leaves a stale lock behind. The file is never deleted (unlinking it would let a newcomer lock
a fresh inode while the holder keeps the old one); it holds the holder's pid, for the refusal message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from bot.errors import DataDirBusy, StoreError
from bot.store.modes import FILE_MODE, private_dir

LOCK_SUFFIX = ".lock"


def lock_path(db_path: Path) -> Path:
    """Where the lock of `db_path` lives: beside it, so it goes wherever the database goes."""
    return db_path.with_name(db_path.name + LOCK_SUFFIX)


@contextlib.contextmanager
def exclusive_database(db_path: Path) -> Iterator[None]:
    """Hold the lock of `db_path` for the `with` block; `DataDirBusy` if another process holds it."""
    path = lock_path(db_path)
    try:
        private_dir(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        os.fchmod(fd, FILE_MODE)
    except OSError as exc:
        raise StoreError(f"cannot open the lock file {path}: {exc.strerror or exc}") from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirBusy(_refusal(db_path, _holder(fd))) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> int | None:
    """The pid the holder wrote, if it got that far (it writes right after locking)."""
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode().strip())
    return None


def _refusal(db_path: Path, pid: int | None) -> str:
    who = f"threadbot (pid {pid})" if pid is not None else "threadbot process"
    return (
        f"{db_path.parent.resolve()} is in use by another {who}: one process per SQLite database; "
        "stop it first, or give this one its own BOT_DATA_DIR"
    )
