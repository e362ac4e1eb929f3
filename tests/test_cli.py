"""The command line as a newcomer meets it: run as real processes from a folder, against the fakes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fakes.anthropic_api import FakeAnthropic
from fakes.slack_api import FakeSlack
from test_console import ROOT, run_bot


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
