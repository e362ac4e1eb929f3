"""The suite passes in a checkout whose `.env` is filled, under a shell that exports the daemon's variables.

A newcomer follows the Quick start: `cp .env.example .env`, fills in tokens, and runs the tests. Nothing
of that `.env`, of the shell or of the home directory may change a test's outcome, so this runs the tests
that read variables (settings, tokens, `check`) in a copy of the checkout set up exactly that way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SENSITIVE_TESTS = [
    "tests/test_slack_daemon.py",
    "tests/test_config.py",
    "tests/test_mcp_config.py",
    "tests/test_check.py",
]
FILLED_DOTENV = """\
SLACK_BOT_TOKEN=xoxb-from-the-developers-dotenv
SLACK_APP_TOKEN=xapp-from-the-developers-dotenv
ANTHROPIC_API_KEY=sk-ant-from-the-developers-dotenv
BOT_MODEL=claude-from-dotenv
BOT_ALLOWED_USERS=U0DEVELOPER
BOT_ENABLE_SHELL=1
"""

pytestmark = pytest.mark.timeout(300)


def test_the_suite_ignores_the_checkouts_dotenv_the_shell_and_the_home(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    for name in ("bot", "tools", "tests"):
        shutil.copytree(ROOT / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", ".env.example"):
        shutil.copy(ROOT / name, checkout / name)
    (checkout / ".env").write_text(FILLED_DOTENV)
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    shell = {
        "HOME": str(home),
        "SLACK_BOT_TOKEN": "xoxb-from-the-developers-shell",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/nowhere",
        "BOT_DATA_DIR": str(tmp_path / "developers-data"),
        "BOT_LOG_LEVEL": "DEBUG",
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *SENSITIVE_TESTS],
        cwd=checkout,
        env=os.environ | shell,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert not (tmp_path / "developers-data").exists()
