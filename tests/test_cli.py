"""The command line as a newcomer meets it: run as real processes from a folder, against the fakes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from fakes.anthropic_api import FakeAnthropic
from fakes.slack_api import FakeSlack
from test_console import ROOT, run_bot

from bot import __version__
from bot.__main__ import SLACK_ONLY, main
from bot.config import Settings

SLACK_ONLY_UPPER = {name.upper() for name in SLACK_ONLY} | {
    name.upper() for name in Settings.model_fields if name.startswith("slack_")
}


def bare_env(**extra: str) -> dict[str, str]:
    """The test's environment without any threadbot, Slack or Anthropic variable: only `.env` may supply them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BOT_", "SLACK_", "ANTHROPIC_"))}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def write_dotenv(folder: Path, **variables: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".env").write_text("".join(f"{name}={value}\n" for name, value in variables.items()))
    return folder


def dotenv_for(folder: Path, fake: FakeAnthropic, slack: FakeSlack) -> Path:
    return write_dotenv(
        folder,
        SLACK_BOT_TOKEN="xoxb-from-dotenv",
        SLACK_APP_TOKEN="xapp-from-dotenv",
        SLACK_API_URL=slack.api_url,
        ANTHROPIC_API_KEY="sk-ant-from-dotenv",
        ANTHROPIC_BASE_URL=fake.url,
    )


async def test_oneshot_needs_nothing_but_dotenv(fake: FakeAnthropic, slack: FakeSlack, tmp_path: Path) -> None:
    folder = dotenv_for(tmp_path / "fresh", fake, slack)
    code, out, err = await run_bot("oneshot", "hello", env=bare_env(), cwd=folder)
    assert code == 0, out + err
    assert json.loads(out)["text"] == "ok"
    assert [h.get("authorization") for h in fake.request_headers] == ["Bearer sk-ant-from-dotenv"]


async def test_version_is_printed_without_reading_any_configuration(tmp_path: Path) -> None:
    folder = write_dotenv(tmp_path / "broken", BOT_TIMEZONE="Not/AZone")  # --version must not care
    code, out, err = await run_bot("--version", env=bare_env(), cwd=folder)
    assert (code, out, err) == (0, f"threadbot {__version__}\n", "")


def test_bare_threadbot_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: threadbot [-h] [--version] COMMAND ...")
    for command in ("run", "console", "oneshot", "check"):
        assert re.search(rf"^    {command} +\w", out, re.MULTILINE), out


@pytest.mark.parametrize(
    ("command", "says", "reads", "ignores"),
    [
        ("run", "Socket Mode when SLACK_APP_TOKEN", ["SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "BOT_METRICS_PORT"], []),
        ("console", "in this terminal", ["ANTHROPIC_API_KEY", "BOT_MODEL", "BOT_DATA_DIR"], ["SLACK_BOT_TOKEN"]),
        ("oneshot", "one JSON object", ["ANTHROPIC_BASE_URL", "BOT_TOOL_TIMEOUT_S"], ["BOT_ALLOWED_USERS"]),
        ("check", "apps.connections.open", ["SLACK_APP_TOKEN", "ANTHROPIC_API_KEY", "BOT_DATA_DIR"], []),
    ],
)
def test_each_command_help_says_what_it_does_and_what_it_reads(
    capsys: pytest.CaptureFixture[str], command: str, says: str, reads: list[str], ignores: list[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert says in text
    listed = text.split("Reads, from the environment or from .env in the working directory: ")[1]
    names = set(re.findall(r"[A-Z][A-Z0-9_]+", listed))
    assert set(reads) <= names and not set(ignores) & names
    assert {name.upper() for name in Settings.model_fields} - names <= SLACK_ONLY_UPPER


def no_bwrap_env(tmp_path: Path) -> dict[str, str]:
    """The shell on, its sandbox the default bwrap, and a PATH where bwrap is not."""
    empty = tmp_path / "bin"
    empty.mkdir()
    return bare_env(PATH=str(empty), BOT_ENABLE_SHELL="1", BOT_DATA_DIR=str(tmp_path / "data"))


@pytest.mark.parametrize("command", [["run"], ["check"], ["console"], ["oneshot", "hi"]])
async def test_the_shell_without_bwrap_stops_run_and_check_with_one_line(tmp_path: Path, command: list[str]) -> None:
    code, out, err = await run_bot(*command, env=no_bwrap_env(tmp_path), cwd=tmp_path)
    assert code == 2, out + err
    assert err.strip().splitlines() == [
        "threadbot: configuration error: BOT_SHELL_SANDBOX: bwrap not found; install the Debian package "
        "bubblewrap, or set BOT_SHELL_SANDBOX=none"
    ]
