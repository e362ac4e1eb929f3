"""The one-process lock on a SQLite database: exclusive while held, gone with its holder, and a clear refusal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bot.errors import DataDirBusy, StoreError
from bot.store.lock import exclusive_database, lock_path

ROOT = Path(__file__).resolve().parents[1]
HOLDER = """
import sys, time
from pathlib import Path
from bot.store.lock import exclusive_database

with exclusive_database(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_holder_is_refused_naming_the_dir_and_the_pid(tmp_path: Path) -> None:
    db = tmp_path / "data" / "bot.db"
    refusal = re.escape(f"{tmp_path / 'data'} is in use by another threadbot (pid {os.getpid()}): ")
    with exclusive_database(db):
        assert lock_path(db) == tmp_path / "data" / "bot.db.lock"
        assert lock_path(db).read_text() == f"{os.getpid()}\n"
        with pytest.raises(DataDirBusy, match=f"^{refusal}"), exclusive_database(db):
            pass  # pragma: no cover - refused before the body
    with exclusive_database(db):  # released on exit; the file stays, naming the new holder
        assert lock_path(db).read_text() == f"{os.getpid()}\n"


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    db = tmp_path / "bot.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)], stdout=subprocess.PIPE, text=True, env=env
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            with pytest.raises(DataDirBusy, match=re.escape(f"(pid {holder.pid})")), exclusive_database(db):
                pass  # pragma: no cover - refused before the body
        finally:
            holder.kill()  # SIGKILL: none of its exit code runs
    with exclusive_database(db):
        pass


def test_an_unwritable_data_dir_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match="cannot open the lock file"), exclusive_database(blocker / "bot.db"):
        pass  # pragma: no cover - refused before the body
