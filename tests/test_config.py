"""Configuration: every contract variable parses from the environment and `.env`; bad values name themselves."""

from __future__ import annotations

from datetime import time
from pathlib import Path

import anthropic
import pytest

from bot.config import ActiveHours, Settings, YieldMode, YieldStrategy, load_settings
from bot.errors import ConfigError
from bot.model.client import MODEL_CONNECT_TIMEOUT_S, MODEL_READ_TIMEOUT_S, anthropic_provider
from bot.variables import misspelt, source_of

CONTRACT_ENV = {
    "SLACK_BOT_TOKEN": "xoxb-bot-secret-1",
    "SLACK_APP_TOKEN": "xapp-app-secret-2",
    "SLACK_SIGNING_SECRET": "signing-secret-3",
    "SLACK_API_URL": "http://127.0.0.1:9999/api/",
    "BOT_MODEL": "claude-haiku-5-5",
    "BOT_DATA_DIR": "/tmp/threadbot-data",
    "BOT_ALLOWED_USERS": "U1, U2 ,U3",
    "BOT_ALLOWED_CHANNELS": "C1",
    "BOT_CANCEL_REACTIONS": "x,no_entry",
    "BOT_YIELD_STRATEGY": "on_timeout:1500",
    "BOT_MAX_CONCURRENT_TOOLS": "4",
    "BOT_TOOL_TIMEOUT_S": "12.5",
    "BOT_HEARTBEAT_INTERVAL_S": "60",
    "BOT_HEARTBEAT_CHANNEL": "C_HEART",
    "BOT_HEARTBEAT_ACTIVE_HOURS": "08:00-20:00",
    "BOT_TIMEZONE": "Europe/Paris",
    "BOT_ENABLE_SHELL": "1",
    "BOT_METRICS_PORT": "9100",
    "BOT_LOG_FORMAT": "json",
}


def test_every_contract_variable_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in CONTRACT_ENV.items():
        monkeypatch.setenv(name, value)
    s = load_settings(_env_file=None)
    assert s.slack_bot_token is not None and s.slack_bot_token.get_secret_value() == "xoxb-bot-secret-1"
    assert s.slack_app_token is not None and s.slack_app_token.get_secret_value() == "xapp-app-secret-2"
    assert s.slack_signing_secret is not None and s.slack_signing_secret.get_secret_value() == "signing-secret-3"
    assert s.slack_api_url == "http://127.0.0.1:9999/api/"
    assert s.bot_model == "claude-haiku-5-5"
    assert s.bot_data_dir == Path("/tmp/threadbot-data")
    assert s.db_path == Path("/tmp/threadbot-data/bot.db")
    assert s.bot_allowed_users == ("U1", "U2", "U3")
    assert s.bot_allowed_channels == ("C1",)
    assert s.bot_cancel_reactions == ("x", "no_entry")
    assert s.bot_yield_strategy == YieldStrategy(YieldMode.ON_TIMEOUT, 1500)
    assert s.bot_max_concurrent_tools == 4
    assert s.bot_tool_timeout_s == 12.5
    assert s.bot_heartbeat_interval_s == 60
    assert s.bot_heartbeat_channel == "C_HEART"
    assert s.bot_heartbeat_active_hours == ActiveHours(time(8, 0), time(20, 0))
    assert s.heartbeat_enabled
    assert s.bot_timezone == "Europe/Paris" and s.zone.key == "Europe/Paris"
    assert s.bot_enable_shell is True
    assert s.bot_metrics_port == 9100
    assert s.bot_log_format == "json"


def test_defaults_match_the_contract() -> None:
    s = load_settings(_env_file=None)
    assert s.slack_bot_token is None and s.slack_app_token is None and s.slack_signing_secret is None
    assert s.slack_api_url == "https://slack.com/api/"
    assert s.bot_model == "claude-sonnet-5-5"
    assert s.bot_data_dir == Path("./data")
    assert s.bot_allowed_users == () and s.bot_allowed_channels == ()
    assert s.bot_cancel_reactions == ("x", "octagonal_sign")
    assert s.bot_yield_strategy == YieldStrategy(YieldMode.WHEN_ALL_DONE)
    assert s.bot_yield_on_injection is True
    assert s.bot_max_concurrent_tools == 16
    assert s.bot_tool_timeout_s == 600
    assert s.bot_heartbeat_interval_s == 1800
    assert s.bot_heartbeat_channel is None and not s.heartbeat_enabled
    assert s.bot_heartbeat_active_hours is None
    assert s.bot_timezone == "UTC"
    assert s.bot_enable_shell is False
    assert s.bot_metrics_port is None
    assert s.bot_log_format == "text"
    assert s.bot_slack_surface == "auto"


def test_dotenv_file_in_working_directory_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("BOT_MODEL=claude-opus-5-5\nBOT_YIELD_STRATEGY=on_any_progress\n")
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert s.bot_model == "claude-opus-5-5"
    assert s.bot_yield_strategy.mode is YieldMode.ON_ANY_PROGRESS


def test_environment_wins_over_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("BOT_MODEL=from-dotenv\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BOT_MODEL", "from-env")
    assert load_settings().bot_model == "from-env"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", ()),
        ("U1", ("U1",)),
        (" U1 ,U2 ", ("U1", "U2")),
        ("U1,U2,U3", ("U1", "U2", "U3")),
    ],
)
def test_comma_lists(monkeypatch: pytest.MonkeyPatch, value: str, expected: tuple[str, ...]) -> None:
    monkeypatch.setenv("BOT_ALLOWED_USERS", value)
    assert load_settings(_env_file=None).bot_allowed_users == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("when_all_done", YieldStrategy(YieldMode.WHEN_ALL_DONE)),
        ("on_any_progress", YieldStrategy(YieldMode.ON_ANY_PROGRESS)),
        ("on_timeout:250", YieldStrategy(YieldMode.ON_TIMEOUT, 250)),
        (" on_timeout:5000 ", YieldStrategy(YieldMode.ON_TIMEOUT, 5000)),
    ],
)
def test_yield_strategies_parse(monkeypatch: pytest.MonkeyPatch, text: str, expected: YieldStrategy) -> None:
    monkeypatch.setenv("BOT_YIELD_STRATEGY", text)
    assert load_settings(_env_file=None).bot_yield_strategy == expected


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("BOT_YIELD_STRATEGY", "sometimes"),
        ("BOT_YIELD_STRATEGY", "on_timeout"),
        ("BOT_YIELD_STRATEGY", "on_timeout:abc"),
        ("BOT_YIELD_STRATEGY", "on_timeout:0"),
        ("BOT_YIELD_STRATEGY", "on_timeout:-5"),
        ("BOT_YIELD_STRATEGY", "when_all_done:5"),
        ("BOT_HEARTBEAT_INTERVAL_S", "-1"),
        ("BOT_TOOL_TIMEOUT_S", "-5"),
        ("BOT_TOOL_TIMEOUT_S", "0"),
        ("BOT_MAX_CONCURRENT_TOOLS", "0"),
        ("BOT_MAX_CONCURRENT_TOOLS", "many"),
        ("BOT_ALLOWED_USERS", "U1,,U2"),
        ("BOT_ALLOWED_CHANNELS", "C1,"),
        ("BOT_CANCEL_REACTIONS", ",x"),
        ("BOT_TIMEZONE", "Mars/Olympus_Mons"),
        ("BOT_TIMEZONE", "../../etc/passwd"),
        ("BOT_HEARTBEAT_ACTIVE_HOURS", "8-20"),
        ("BOT_HEARTBEAT_ACTIVE_HOURS", "25:00-08:00"),
        ("BOT_METRICS_PORT", "70000"),
        ("BOT_LOG_FORMAT", "xml"),
        ("BOT_ENABLE_SHELL", "maybe"),
        ("BOT_SLACK_SURFACE", "fancy"),
    ],
)
def test_bad_value_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    message = str(info.value)
    assert message.startswith(f"{variable}: "), message
    assert "\n" not in message
    assert "Value error" not in message
    assert len(message) > len(variable) + 5


def test_unknown_strategy_message_lists_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOT_YIELD_STRATEGY", "sometimes")
    with pytest.raises(ConfigError, match="when_all_done, on_any_progress or on_timeout:MS"):
        load_settings(_env_file=None)


def test_config_error_from_dotenv_also_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("BOT_TIMEZONE=Not/AZone\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^BOT_TIMEZONE: unknown time zone 'Not/AZone'$"):
        load_settings()


def test_zero_heartbeat_interval_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOT_HEARTBEAT_INTERVAL_S", "0")
    monkeypatch.setenv("BOT_HEARTBEAT_CHANNEL", "C1")
    assert not load_settings(_env_file=None).heartbeat_enabled


def test_empty_optional_values_mean_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOT_HEARTBEAT_CHANNEL", "")
    monkeypatch.setenv("BOT_METRICS_PORT", "")
    monkeypatch.setenv("BOT_HEARTBEAT_ACTIVE_HOURS", "")
    s = load_settings(_env_file=None)
    assert s.bot_heartbeat_channel is None and s.bot_metrics_port is None and s.bot_heartbeat_active_hours is None


def test_active_hours_window_wrapping_midnight() -> None:
    night = ActiveHours.parse("22:00-06:00")
    assert night.contains(time(23, 30)) and night.contains(time(5, 59))
    assert not night.contains(time(6, 0)) and not night.contains(time(12, 0))
    day = ActiveHours.parse("08:00-20:00")
    assert day.contains(time(8, 0)) and not day.contains(time(20, 0))


def test_secrets_stay_out_of_repr_and_str(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"):
        monkeypatch.setenv(name, CONTRACT_ENV[name])
    s = load_settings(_env_file=None)
    shown = [repr(s), str(s), repr(s.slack_bot_token), str(s.slack_bot_token), repr(s.model_dump())]
    for secret in ("xoxb-bot-secret-1", "xapp-app-secret-2", "signing-secret-3"):
        assert all(secret not in text for text in shown)


def test_secrets_stay_out_of_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-bot-secret-1")
    monkeypatch.setenv("BOT_TIMEZONE", "Nowhere/Zone")
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert "xoxb-bot-secret-1" not in str(info.value) and "xoxb-bot-secret-1" not in repr(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_anthropic_variables_come_from_dotenv_like_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-dotenv\nANTHROPIC_BASE_URL=http://127.0.0.1:1/\n")
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert s.anthropic_api_key is not None and s.anthropic_api_key.get_secret_value() == "sk-ant-dotenv"
    assert s.anthropic_base_url == "http://127.0.0.1:1/"
    assert "sk-ant-dotenv" not in repr(s)


def test_the_model_client_is_handed_the_settings_not_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-environ")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://environ.invalid/")
    settings = load_settings(_env_file=None, anthropic_api_key="sk-ant-settings", anthropic_base_url="http://s.test/")
    client = anthropic_provider(settings)._client
    assert client.api_key == "sk-ant-settings" and str(client.base_url) == "http://s.test/"
    assert client.timeout == anthropic.Timeout(MODEL_READ_TIMEOUT_S, connect=MODEL_CONNECT_TIMEOUT_S)


SECRETS = ["SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "ANTHROPIC_API_KEY"]


@pytest.mark.parametrize("variable", SECRETS)
def test_an_empty_secret_is_unset(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "  ")
    assert getattr(load_settings(_env_file=None), variable.lower()) is None


@pytest.mark.parametrize(
    ("variable", "value", "example"),
    [
        ("SLACK_API_URL", "notaurl", "https://slack.com/api/"),
        ("SLACK_API_URL", "slack.com/api", "https://slack.com/api/"),
        ("SLACK_API_URL", "ftp://slack.com/api/", "https://slack.com/api/"),
        ("ANTHROPIC_BASE_URL", "notaurl", "https://api.anthropic.com"),
        ("ANTHROPIC_BASE_URL", "http://", "https://api.anthropic.com"),
    ],
)
def test_a_url_that_is_no_url_is_named(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, example: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert str(info.value) == f"{variable}: {value!r} is not an http(s) URL; it should look like {example}"


def test_a_misspelt_variable_is_named_with_the_setting_meant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("BOT_TOOL_TIMEOUT=5\nbot_model=claude-opus-5-5\nSLACK_COLOR=blue\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BOT_ALLOWED_USER", "U1")
    monkeypatch.setenv("BOT_XYZZY", "1")
    monkeypatch.setenv("BOT_TIMEZONE", "UTC")
    assert misspelt(Settings.model_fields) == [
        "BOT_ALLOWED_USER (set in the environment) is not a threadbot setting and is ignored; "
        "did you mean BOT_ALLOWED_USERS?",
        "BOT_TOOL_TIMEOUT (set in .env) is not a threadbot setting and is ignored; did you mean BOT_TOOL_TIMEOUT_S?",
        "BOT_XYZZY (set in the environment) is not a threadbot setting and is ignored; no setting has a name like it",
    ]


def test_the_source_of_a_value_is_the_environment_before_dotenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("SLACK_BOT_TOKEN=xoxb-file\nslack_app_token=xapp-file\n")
    monkeypatch.chdir(tmp_path)
    assert source_of("SLACK_APP_TOKEN") == ".env"
    assert source_of("SLACK_BOT_TOKEN") == ".env"
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-env")
    assert source_of("SLACK_BOT_TOKEN") == "the environment"
    assert source_of("SLACK_SIGNING_SECRET") is None


def test_the_shell_without_bwrap_is_refused_when_asked_not_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bot.config.shutil.which", lambda name: None)
    settings = load_settings(_env_file=None, bot_enable_shell=True)  # `usage` and `migrate` read it too
    with pytest.raises(
        ConfigError, match=r"^BOT_SHELL_SANDBOX: bwrap not found; install the Debian package bubblewrap"
    ):
        settings.require_sandbox()
    load_settings(_env_file=None, bot_enable_shell=True, bot_shell_sandbox="none").require_sandbox()
    load_settings(_env_file=None).require_sandbox()  # the shell off: nothing to fence
