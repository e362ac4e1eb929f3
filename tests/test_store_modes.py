"""The data at rest is private: the data dir 0700, `bot.db` and its -wal, -shm and lock 0600, under umask 022."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.check import check_database
from bot.config import load_settings
from bot.store import SqliteStore
from bot.store.lock import exclusive_database
from bot.store.modes import loose_modes


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual default umask, which would leave new files 0644 and new dirs 0755."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("umask_022")
async def test_a_new_data_dir_and_every_database_file_are_private(tmp_path: Path) -> None:
    db_path = tmp_path / "data" / "bot.db"
    with exclusive_database(db_path):
        store = await SqliteStore.open(db_path)
        try:
            await store.ensure_session("s1")  # writes: the -wal and -shm exist
            assert mode(db_path.parent) == 0o700
            for suffix in ("", "-wal", "-shm", ".lock"):
                path = db_path.with_name(db_path.name + suffix)
                assert path.exists(), suffix
                assert mode(path) == 0o600, (suffix, oct(mode(path)))
        finally:
            await store.close()
    assert loose_modes(db_path) == []


@pytest.mark.usefixtures("umask_022")
async def test_looser_modes_left_by_an_older_install_are_named_by_check_and_tightened(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = await SqliteStore.open(data / "bot.db")
    await store.ensure_session("s1")
    await store.close()
    os.chmod(data, 0o755)
    os.chmod(data / "bot.db", 0o644)
    assert len(loose_modes(data / "bot.db")) == 2
    settings = load_settings(_env_file=None, bot_data_dir=data)
    report = await check_database(settings)
    warnings = [line for line in report.splitlines() if line.startswith("!")]
    assert len(warnings) == 2 and "755" in warnings[0] and "644" in warnings[1], report
    assert mode(data) == 0o700 and mode(data / "bot.db") == 0o600
    assert loose_modes(data / "bot.db") == []
