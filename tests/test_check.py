"""`check` checks what `run` needs, each probe bounded, each failure naming the variable and the URL."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from fakes.anthropic_api import Failure, FakeAnthropic, Outcome, Reply, system_text
from fakes.slack_api import FakeSlack
from test_cli import bare_env, dotenv_for, write_dotenv
from test_console import ROOT, run_bot

from bot import check
from bot.config import Settings, load_settings
from bot.errors import ConfigError, ThreadbotError
from bot.policy import Policy
from bot.store import SqliteStore

QUICK_S = 0.5
"""The probe bound in tests of a server that never answers (the real one is 30 s)."""
GENEROUS_S = 10.0


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(tokens={"xoxb-good", "xapp-good"}) as server:
        yield server


@pytest.fixture
def good(
    make_settings: Callable[..., Settings], slack: FakeSlack, fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Settings]:
    """Settings that pass every check against the fakes; keyword overrides spoil one thing."""
    monkeypatch.chdir(make_settings().bot_data_dir)  # no stray .env of the developer's is read

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "slack_bot_token": "xoxb-good",
            "slack_app_token": "xapp-good",
            "slack_api_url": slack.api_url,
            "anthropic_api_key": "sk-ant-test",
            "anthropic_base_url": fake.url,
        }
        return make_settings(**{**values, **overrides})

    return make


async def outcome_lines(settings: Settings, capsys: pytest.CaptureFixture[str], **kwargs: Any) -> tuple[int, list[str]]:
    code = await check.run_checks(settings, **kwargs)
    return code, capsys.readouterr().out.splitlines()


async def test_everything_fine_is_all_ticks_and_both_tokens_were_tried(
    good: Callable[..., Settings], slack: FakeSlack, fake: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = good()
    code, lines = await outcome_lines(settings, capsys)
    assert code == 0, lines
    assert [line[0] for line in lines if not line.startswith("  ")] == ["✓"] * 8  # the policy check lists its tables
    assert lines[4] == "✓ no operator tools (BOT_TOOL_MODULES is empty and no package declares threadbot.tools)"
    assert lines[5] == "✓ the shell is off (BOT_ENABLE_SHELL)"
    assert lines[6] == "✓ no MCP servers configured (BOT_MCP_CONFIG is not set)"
    assert lines[2] == (
        f'✓ Slack at {slack.api_url}: bot @threadbot (UBOT) in team "Threadbot Test" (T1); '
        "Socket Mode (SLACK_APP_TOKEN opens a connection)"
    )
    assert lines[3] == f"✓ model claude-sonnet-5-5 answers at ANTHROPIC_BASE_URL={fake.url}"
    assert [(call.method, call.token) for call in slack.calls] == [
        ("auth.test", "xoxb-good"),
        ("apps.connections.open", "xapp-good"),
    ]
    [request] = fake.requests
    assert system_text(request) == check.PROBE_SYSTEM and request["max_tokens"] == 1  # never an empty system


async def test_a_bad_app_token_fails_check_as_it_would_fail_run(
    good: Callable[..., Settings], slack: FakeSlack, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = await outcome_lines(good(slack_app_token="xapp-revoked"), capsys)
    assert code == 1
    [slack_line] = [line for line in lines if line.startswith("✗")]
    assert slack_line.startswith(
        f"✗ slack: SLACK_APP_TOKEN: Slack at {slack.api_url} refused it (invalid_auth). "
        "SLACK_APP_TOKEN should be the app-level token (xapp-…): an App-Level Token with the connections:write "
        "scope, under Basic Information → App-Level Tokens."
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"slack_bot_token": "xoxb-..."},
            "SLACK_BOT_TOKEN: still the placeholder from .env.example. SLACK_BOT_TOKEN should be the bot token "
            "(xoxb-…): the Bot User OAuth Token, under OAuth & Permissions once the app is installed",
        ),
        ({"slack_app_token": "xapp-…"}, "SLACK_APP_TOKEN: still the placeholder from .env.example."),
        (
            {"slack_bot_token": "xapp-good", "slack_app_token": "xoxb-good"},
            "SLACK_BOT_TOKEN and SLACK_APP_TOKEN are swapped: SLACK_BOT_TOKEN holds an xapp-… token and "
            "SLACK_APP_TOKEN an xoxb-… one",
        ),
        (
            {"slack_bot_token": "xapp-good"},
            "SLACK_BOT_TOKEN: holds the app-level token (xapp-…), which belongs in SLACK_APP_TOKEN.",
        ),
        ({"slack_app_token": "xoxb-good"}, "SLACK_APP_TOKEN: holds the bot token (xoxb-…), which belongs in"),
        ({"slack_bot_token": "xoxp-123"}, "SLACK_BOT_TOKEN: holds a user token (xoxp-…), not the bot token."),
        ({"slack_bot_token": "12345"}, "SLACK_BOT_TOKEN: does not look like the bot token: it should start with xoxb-"),
    ],
)
async def test_token_shapes_are_named_before_slack_is_asked(
    good: Callable[..., Settings], slack: FakeSlack, overrides: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        await check.check_slack(good(**overrides))
    assert str(info.value).startswith(message), str(info.value)
    assert slack.calls == []


async def test_a_hint_says_where_the_token_was_set(
    good: Callable[..., Settings], slack: FakeSlack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    write_dotenv(tmp_path, SLACK_BOT_TOKEN="xoxb-from-the-file", SLACK_APP_TOKEN="xapp-good")
    monkeypatch.chdir(tmp_path)
    from_file = load_settings(slack_api_url=slack.api_url, bot_data_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^SLACK_BOT_TOKEN \(set in \.env\): Slack at .* refused it"):
        await check.check_slack(from_file)
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-from-the-shell")
    from_env = load_settings(slack_api_url=slack.api_url, bot_data_dir=tmp_path)
    with pytest.raises(
        ConfigError, match=r"^SLACK_BOT_TOKEN \(set in the environment, which wins over \.env\): Slack at"
    ):
        await check.check_slack(from_env)


async def test_a_slack_that_never_answers_costs_the_bound_and_names_the_url(
    good: Callable[..., Settings], slack: FakeSlack
) -> None:
    slack.hold("auth.test")  # accepted, never answered
    started = time.monotonic()
    with pytest.raises(ThreadbotError) as info:
        await check.check_slack(good(), QUICK_S)
    assert time.monotonic() - started < GENEROUS_S
    assert str(info.value) == f"no answer from Slack at {slack.api_url} (SLACK_API_URL) within {QUICK_S:g}s"


async def test_a_model_that_never_answers_costs_the_bound_and_names_the_variable(
    good: Callable[..., Settings], fake: FakeAnthropic
) -> None:
    async def never(body: dict[str, Any]) -> Outcome:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    fake.default = never
    started = time.monotonic()
    with pytest.raises(ThreadbotError) as info:
        await check.check_model(good(), QUICK_S)
    assert time.monotonic() - started < GENEROUS_S
    assert str(info.value) == f"no answer from the model API at {fake.url} (ANTHROPIC_BASE_URL) within {QUICK_S:g}s"


async def test_a_refused_model_key_names_the_url_and_the_key(
    good: Callable[..., Settings], fake: FakeAnthropic
) -> None:
    fake.default = Failure(401, "authentication_error", "invalid x-api-key")
    with pytest.raises(ThreadbotError) as info:
        await check.check_model(good())
    assert str(info.value) == f"ANTHROPIC_API_KEY: the model API at {fake.url} refused it (HTTP 401: invalid x-api-key)"


async def test_an_unreachable_model_names_the_variable_and_the_cause(
    good: Callable[..., Settings], fake: FakeAnthropic
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        refusing = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(ThreadbotError) as info:
        await check.check_model(good(anthropic_base_url=refusing))
    assert str(info.value) == f"cannot reach the model API at {refusing} (ANTHROPIC_BASE_URL): connection refused"
    plain = fake.url.replace("http://", "https://")  # TLS spoken to a server that answers in plain HTTP
    with pytest.raises(ThreadbotError) as info:
        await check.check_model(good(anthropic_base_url=plain))
    assert str(info.value).startswith(f"cannot reach the model API at {plain} (ANTHROPIC_BASE_URL): TLS: ")
    assert fake.requests == []


async def test_the_probes_run_at_once_and_print_in_order(
    good: Callable[..., Settings], slack: FakeSlack, fake: FakeAnthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    """Slack's answer waits for the model's request: one after the other, the Slack probe would time out."""
    asked = slack.hold("auth.test")

    def answer(body: dict[str, Any]) -> Outcome:
        asked.set()
        return Reply.text_only("ok")

    fake.default = answer
    code, lines = await outcome_lines(good(), capsys, timeout_s=GENEROUS_S)
    assert code == 0, lines
    starts = ["✓ configuration", "✓ BOT_DATA_DIR", "✓ Slack at", "✓ model", "✓ no operator tools", "✓ the shell"]
    assert [line[: len(start)] for line, start in zip(lines, starts, strict=False)] == starts
    assert [line[0] for line in lines if not line.startswith("  ")] == ["✓"] * 8


async def test_the_model_key_placeholder_and_absence_are_named(
    good: Callable[..., Settings], fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=r"^ANTHROPIC_API_KEY: still the placeholder from \.env\.example"):
        await check.check_model(good(anthropic_api_key="sk-ant-..."))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"^ANTHROPIC_API_KEY: not set"):
        await check.check_model(good(anthropic_api_key=None))
    assert fake.requests == []


async def test_check_leaves_no_database_where_there_was_none(
    good: Callable[..., Settings], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty, missing = tmp_path / "empty", tmp_path / "not" / "yet"
    empty.mkdir()
    for folder in (empty, missing):
        code, lines = await outcome_lines(good(bot_data_dir=folder), capsys)
        assert code == 0, lines
        assert lines[1] == f"✓ BOT_DATA_DIR {folder} can be written; run will create bot.db there"
    assert list(empty.iterdir()) == [] and not missing.parent.exists()


async def test_an_existing_database_is_opened(
    good: Callable[..., Settings], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = good(bot_data_dir=tmp_path / "data")
    await (await SqliteStore.open(settings.db_path)).close()
    assert await check.check_database(settings) == f"database {settings.db_path} opens and is migrated"


async def test_a_data_dir_that_is_a_file_names_the_variable(good: Callable[..., Settings], tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    with pytest.raises(ConfigError, match=r"^BOT_DATA_DIR: .*/plain/data cannot be a folder, .*/plain is a file$"):
        await check.check_database(good(bot_data_dir=tmp_path / "plain" / "data"))


async def test_a_read_only_data_dir_names_the_variable(tmp_path: Path) -> None:
    """As a process that cannot override file modes (root is made to honour them through setpriv)."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: a read-only folder would still be writable")
        prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o555)
    try:
        process = await asyncio.create_subprocess_exec(
            *prefix,
            sys.executable,
            "-m",
            "bot",
            "check",
            env=bare_env(BOT_DATA_DIR=str(data)),
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        raw_out, raw_err = await asyncio.wait_for(process.communicate(), 30)
    finally:
        data.chmod(0o755)
    out, err = raw_out.decode(), raw_err.decode()
    assert process.returncode == 1, out + err
    assert f"✗ database: BOT_DATA_DIR: cannot write in {data} (Permission denied); run keeps bot.db there" in out
    assert list(data.iterdir()) == []


async def test_check_needs_nothing_but_dotenv_and_leaves_no_database(fake: FakeAnthropic, tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        folder = dotenv_for(tmp_path / "fresh", fake, slack)
        code, out, err = await run_bot("check", env=bare_env(), cwd=folder)
    assert code == 0, out + err
    assert out.count("✓ ") == 8 and "✗" not in out
    assert [h.get("authorization") for h in fake.request_headers] == ["Bearer sk-ant-from-dotenv"]
    assert {(call.method, call.token) for call in slack.calls} == {
        ("auth.test", "xoxb-from-dotenv"),
        ("apps.connections.open", "xapp-from-dotenv"),
    }
    assert sorted(path.name for path in folder.iterdir()) == [".env"]


async def test_a_url_that_is_no_url_stops_check_and_run_with_one_line(tmp_path: Path) -> None:
    write_dotenv(tmp_path, SLACK_API_URL="notaurl", SLACK_BOT_TOKEN="xoxb-1", SLACK_APP_TOKEN="xapp-1")
    for command in ("check", "run"):
        code, out, err = await run_bot(command, env=bare_env(), cwd=tmp_path)
        assert (code, out) == (2, "")
        assert err == (
            "threadbot: configuration error: SLACK_API_URL: 'notaurl' is not an http(s) URL; "
            "it should look like https://slack.com/api/\n"
        )


async def test_env_example_copied_as_is_gets_told_what_to_fill_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(ROOT / ".env.example", tmp_path / ".env")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    settings = load_settings()
    with pytest.raises(ConfigError) as slack_error:
        await check.check_slack(settings)
    assert str(slack_error.value).startswith("SLACK_BOT_TOKEN (set in .env): still the placeholder from .env.example.")
    with pytest.raises(ConfigError) as model_error:
        await check.check_model(settings)
    assert str(model_error.value).startswith("ANTHROPIC_API_KEY (set in .env): still the placeholder")


async def test_a_clash_of_operator_tools_fails_check_as_it_would_fail_run(
    good: Callable[..., Settings], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "clashing_tools.py").write_text(
        "from tools.base import tool\n\n@tool('now', 'A second now.')\ndef now(args, ctx):\n    return 'late'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code, lines = await outcome_lines(good(bot_tool_modules="clashing_tools"), capsys)
    assert code == 1
    (line,) = [line for line in lines if line.startswith("✗ tools")]
    assert "now" in line and "clashing_tools" in line and "built-in" in line


async def test_a_bad_policy_file_fails_check_naming_the_file_and_line(
    good: Callable[..., Settings], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[default]\nallow = ["now"]\ndeny = ["run_command(rm"]\n')
    code, lines = await outcome_lines(good(bot_policy_file=policy), capsys, timeout_s=GENEROUS_S)
    assert code == 1
    assert f"✗ policy: {policy}:3: [default]: 'run_command(rm' is not a tool pattern (NAME or NAME(ARGUMENTS))" in lines


async def test_check_lists_the_policy_and_warns_when_anyone_may_run_commands_unasked(
    good: Callable[..., Settings], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = await outcome_lines(
        good(bot_policy_file=None, bot_enable_shell=True, bot_shell_sandbox="none"), capsys
    )
    assert code == 0 and any(line.startswith("✓ built-in policy: ") for line in lines)
    assert not [line for line in lines if "!" in line[:4]], "run_command asks: nothing to warn about"
    policy = tmp_path / "open.toml"
    policy.write_text('[default]\nallow = ["run_command"]\n[[rule]]\nchannels = ["C0OPS"]\ndeny = ["mcp__*"]\n')
    settings = good(bot_policy_file=policy, bot_enable_shell=True, bot_shell_sandbox="none")
    code, lines = await outcome_lines(settings, capsys)
    assert code == 0 and f"✓ policy file {policy} (unnamed tools: the built-in choice)" in lines
    assert "  [[rule]] #1 channels=C0OPS | deny: mcp__* | approvers: the asker" in lines
    assert lines[-1] == (
        "  ! the shell is on (BOT_ENABLE_SHELL=1), nobody is restricted (BOT_ALLOWED_USERS is empty), run_command "
        f"needs no approval ({policy} [default]: allow run_command): everyone the bot answers can have it run commands"
    )
    restricted = good(bot_policy_file=policy, bot_enable_shell=True, bot_shell_sandbox="none", bot_allowed_users="U1")
    assert check.open_shell_warning(restricted, Policy.load(policy)) is None
    assert check.open_shell_warning(good(bot_policy_file=policy), Policy.load(policy)) is None, "no shell"
