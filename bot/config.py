"""Configuration: every variable of the contract, read from the environment and `.env`.

pydantic-settings does the reading and the type checks; what is left here is the
few formats the contract defines itself (comma lists, the yield strategy, active
hours) and turning a validation failure into one line that names the variable.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from dataclasses import dataclass
from datetime import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.errors import ConfigError
from bot.model.prices import DEFAULT_PRICES, Price
from bot.quotas import Quotas
from tools.sandbox import Sandbox, ShellPolicy, secret_name_reason


class YieldMode(StrEnum):
    WHEN_ALL_DONE = "when_all_done"
    ON_ANY_PROGRESS = "on_any_progress"
    ON_TIMEOUT = "on_timeout"


@dataclass(frozen=True, slots=True)
class YieldStrategy:
    """When a turn stops waiting for its tool batch and hands partial results to the model."""

    mode: YieldMode
    timeout_ms: int | None = None

    @classmethod
    def parse(cls, text: str) -> YieldStrategy:
        name, _, arg = text.strip().partition(":")
        try:
            mode = YieldMode(name)
        except ValueError:
            raise ValueError(
                f"unknown strategy {text!r}; use when_all_done, on_any_progress or on_timeout:MS"
            ) from None
        if mode is YieldMode.ON_TIMEOUT:
            if not arg.isdigit() or int(arg) <= 0:
                raise ValueError("on_timeout needs a positive number of milliseconds, e.g. on_timeout:5000")
            return cls(mode, int(arg))
        if arg:
            raise ValueError(f"{name} takes no argument")
        return cls(mode)


@dataclass(frozen=True, slots=True)
class SuggestedPrompt:
    """A starter Slack offers in a new agent thread: `title` is the chip, `message` what it sends."""

    title: str
    message: str


MAX_SUGGESTED_PROMPTS = 4
"""Slack shows at most four (`assistant.threads.setSuggestedPrompts`)."""
DEFAULT_SUGGESTED_PROMPTS = (
    SuggestedPrompt("Run a long task", "Sleep for 90 seconds, showing me the progress, then tell me it is done."),
    SuggestedPrompt("Remind me", "Remind me in 10 minutes to stretch."),
    SuggestedPrompt("Wait, then come back", "Wait 5 minutes, then tell me the time and how long you waited."),
)


def _suggested_prompts(value: Any) -> Any:
    """`BOT_SUGGESTED_PROMPTS`: a JSON list of at most four `{"title", "message"}` objects, both non-empty."""
    if not isinstance(value, str):
        return value
    try:
        items = json.loads(value) if value.strip() else []
    except json.JSONDecodeError as exc:
        raise ValueError(f'not JSON ({exc.msg}); expected [{{"title": "…", "message": "…"}}, …]') from None
    if not isinstance(items, list):
        raise ValueError('expected a JSON list of {"title", "message"} objects')
    if len(items) > MAX_SUGGESTED_PROMPTS:
        raise ValueError(f"{len(items)} prompts; Slack shows at most {MAX_SUGGESTED_PROMPTS}")
    prompts = []
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict) or set(item) != {"title", "message"}:
            raise ValueError(f'prompt {n}: expected exactly the keys "title" and "message"')
        if not all(isinstance(item[k], str) and item[k].strip() for k in ("title", "message")):
            raise ValueError(f"prompt {n}: title and message must be non-empty strings")
        prompts.append(SuggestedPrompt(item["title"].strip(), item["message"].strip()))
    return tuple(prompts)


@dataclass(frozen=True, slots=True)
class ActiveHours:
    """A daily window such as 08:00-20:00; a window that wraps midnight (22:00-06:00) is allowed."""

    start: time
    end: time

    @classmethod
    def parse(cls, text: str) -> ActiveHours:
        match = re.fullmatch(r"(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})", text.strip())
        if not match:
            raise ValueError(f"expected HH:MM-HH:MM, got {text!r}")
        h1, m1, h2, m2 = (int(g) for g in match.groups())
        try:
            return cls(time(h1, m1), time(h2, m2))
        except ValueError as exc:
            raise ValueError(f"{text!r}: {exc}") from None

    def contains(self, moment: time) -> bool:
        if self.start <= self.end:
            return self.start <= moment < self.end
        return moment >= self.start or moment < self.end


CommaList = Annotated[tuple[str, ...], NoDecode]


def _split_commas(value: Any) -> Any:
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",")]
        if any(not item for item in items) and value.strip():
            raise ValueError(f"malformed comma list {value!r} (empty item)")
        return tuple(item for item in items if item)
    return value


CLUSTER_PACKAGES = ("procrastinate", "psycopg")
"""Cluster mode's job queue and driver: the `postgres` extra, which a SQLite install goes without."""

_URL_EXAMPLES = {"slack_api_url": "https://slack.com/api/", "anthropic_base_url": "https://api.anthropic.com"}


class Settings(BaseSettings):
    """The daemon's settings; field names are the contract's variable names, lower-cased."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore", frozen=True)

    slack_bot_token: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_api_url: str = "https://slack.com/api/"
    # Read here, not by the SDK from os.environ, so that `.env` works for them as for everything else.
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None

    bot_model: str = "claude-sonnet-5-5"
    bot_max_tokens: int = Field(8192, gt=0)
    bot_model_idle_timeout_s: float = Field(90, gt=0)
    bot_model_timeout_s: float = Field(600, gt=0)
    bot_data_dir: Path = Path("./data")
    bot_database_url: SecretStr | None = None  # PostgreSQL: cluster mode; unset: SQLite in BOT_DATA_DIR
    bot_allowed_users: CommaList = ()
    bot_allowed_channels: CommaList = ()
    bot_admin_users: CommaList = ()  # may make the bot forget any thread
    bot_allowed_teams: CommaList = ()  # Slack team ids besides the bot's own whose people it answers
    bot_cancel_reactions: CommaList = ("x", "octagonal_sign")
    bot_mention_only_channels: CommaList = ()  # channel ids, or `*`: replies there must mention the bot
    bot_suggested_prompts: Annotated[tuple[SuggestedPrompt, ...], NoDecode] = DEFAULT_SUGGESTED_PROMPTS
    bot_yield_strategy: Annotated[YieldStrategy, NoDecode] = YieldStrategy(YieldMode.WHEN_ALL_DONE)
    bot_yield_on_injection: bool = True
    bot_max_concurrent_tools: int = Field(16, gt=0)
    bot_max_concurrent_tools_per_session: int = Field(8, gt=0)
    bot_max_concurrent_io_tools: int = Field(1000, gt=0)
    bot_tool_timeout_s: float = Field(600, gt=0)
    bot_max_iterations: int = Field(25, gt=0)
    bot_max_injections_per_turn: int = Field(20, gt=0)
    bot_tool_result_max_chars: int = Field(20_000, gt=100)
    bot_status_wait_max_s: float = Field(300, gt=0)
    bot_max_wait_s: float = Field(30 * 86400, gt=0)
    bot_max_lateness_s: float = Field(6 * 3600, gt=0)
    bot_heartbeat_interval_s: float = Field(1800, ge=0)
    bot_heartbeat_channel: str | None = None
    bot_heartbeat_active_hours: Annotated[ActiveHours | None, NoDecode] = None
    bot_timezone: str = "UTC"
    bot_enable_shell: bool = False
    bot_shell_env: CommaList = ()  # names of the daemon's variables a command may see besides the basics
    bot_shell_sandbox: Sandbox = Sandbox.BWRAP
    bot_shell_network: bool = False
    bot_metrics_port: int | None = Field(None, gt=0, lt=65536)
    bot_retention_days: int = Field(90, ge=0)  # 0 keeps sessions forever
    bot_metrics_host: str = "127.0.0.1"  # loopback: /metrics is for a scraper on this host unless told otherwise
    bot_socket_ping_interval_s: float = Field(10, gt=0)
    bot_socket_max_silence_s: float = Field(3600, ge=0)
    bot_slack_edits_per_minute: float = Field(50, gt=0)
    """The workspace's `chat.update` budget, which every edit of the process (and of a cluster's live replicas
    together) stays within: Slack's Tier 3, about 50 a minute. A workspace Slack lets edit faster may raise it."""
    bot_home_refresh_s: float = Field(15, gt=0)
    """How often an open home tab is published again, to show what changed elsewhere (another replica, a
    reminder that came due); a change this process makes shows at once."""
    bot_stop_flush_s: float = Field(10, ge=0)
    """How long a stopping daemon spends on what it still owes Slack, once for the queued posts and once for the
    final edits; what has not landed by then stays owed in the store for the next start. A deploy that gives a
    stop less time (a short termination grace period) lowers it."""
    bot_log_format: str = "text"
    bot_slack_surface: Literal["auto", "agent", "classic"] = "auto"
    """How a turn shows in Slack: one streamed message with task cards (`agent`), or status messages and an
    edited answer (`classic`); `auto` streams where Slack accepts it."""
    bot_prompt_cache: Literal["5m", "1h", "off"] = "5m"
    bot_model_prices: dict[str, Price] = Field(default_factory=dict)
    bot_context_window: int = Field(200_000, ge=1_000)
    bot_compact_at: float = Field(0.75, gt=0, le=1)
    bot_max_input_chars: int = Field(100_000, gt=1_000)
    bot_mcp_config: Path | None = None
    bot_policy_file: Path | None = None  # TOML: which tools are allowed, need an approval, or are refused
    bot_approval_timeout_s: float = Field(900, gt=0)
    bot_tool_modules: CommaList = ()
    bot_file_max_bytes: int = Field(5_000_000, gt=0)
    bot_files_max_total_bytes: int = Field(20_000_000, gt=0)
    bot_file_text_max_chars: int = Field(100_000, gt=100)
    bot_upload_over_chars: int = Field(12_000, gt=100)
    # Quotas (bot/quotas.py); the README's "Quotas" says why each default.
    bot_max_reminders_per_user: int = Field(50, gt=0)
    bot_min_cron_interval_s: float = Field(60, ge=60)
    bot_max_reminder_chars: int = Field(2000, gt=0)
    bot_min_wait_s: float = Field(1, gt=0)
    bot_max_concurrent_tools_per_user: int = Field(8, gt=0)
    bot_max_self_wakes_per_day: int = Field(48, ge=0)
    bot_daily_tokens_per_user: int | None = Field(None, gt=0)
    bot_daily_tokens_per_channel: int | None = Field(None, gt=0)

    @field_validator(
        "bot_allowed_users",
        "bot_allowed_channels",
        "bot_admin_users",
        "bot_allowed_teams",
        "bot_cancel_reactions",
        "bot_mention_only_channels",
        "bot_tool_modules",
        "bot_shell_env",
        mode="before",
    )
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        return _split_commas(value)

    @field_validator("bot_shell_env")
    @classmethod
    def _no_secret_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Refused at the start rather than silently dropped: the operator learns the list does not do that."""
        for name in value:
            if (reason := secret_name_reason(name)) is not None:
                raise ValueError(f"{reason}; it is never passed to run_command")
        return value

    @field_validator("bot_yield_strategy", mode="before")
    @classmethod
    def _yield_strategy(cls, value: Any) -> Any:
        return YieldStrategy.parse(value) if isinstance(value, str) else value

    @field_validator("bot_suggested_prompts", mode="before")
    @classmethod
    def _prompts(cls, value: Any) -> Any:
        return _suggested_prompts(value)

    @field_validator("bot_heartbeat_active_hours", mode="before")
    @classmethod
    def _active_hours(cls, value: Any) -> Any:
        if isinstance(value, str):
            return ActiveHours.parse(value) if value.strip() else None
        return value

    @field_validator(
        "slack_bot_token",
        "slack_app_token",
        "slack_signing_secret",
        "anthropic_api_key",
        "anthropic_base_url",
        "bot_heartbeat_channel",
        "bot_metrics_port",
        "bot_mcp_config",
        "bot_policy_file",
        "bot_database_url",
        "bot_daily_tokens_per_user",
        "bot_daily_tokens_per_channel",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("slack_api_url", "anthropic_base_url")
    @classmethod
    def _http_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A URL without a scheme or host would only fail later, deep in an HTTP client, as a puzzle."""
        if value is None:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            example = _URL_EXAMPLES[str(info.field_name)]
            raise ValueError(f"{value!r} is not an http(s) URL; it should look like {example}")
        return value.strip()

    @field_validator("bot_database_url")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        """Only PostgreSQL is spoken; the message never repeats the URL, which may hold a password."""
        if value is None:
            return None
        scheme = urlsplit(value.get_secret_value().strip()).scheme
        if scheme not in ("postgresql", "postgres"):
            shown = f"{scheme}://" if scheme else "no scheme"
            raise ValueError(f"must be a postgresql:// (or postgres://) URL, not {shown}")
        missing = [name for name in CLUSTER_PACKAGES if importlib.util.find_spec(name) is None]
        if missing:
            raise ValueError(
                f"cluster mode needs {' and '.join(missing)}, which the default install leaves out: "
                "pip install 'threadbot[postgres]'"
            )
        return SecretStr(value.get_secret_value().strip())

    @field_validator("bot_timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value

    @field_validator("bot_log_format")
    @classmethod
    def _log_format(cls, value: str) -> str:
        if value not in ("text", "json"):
            raise ValueError("must be text or json")
        return value

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.bot_timezone)

    @property
    def prices(self) -> dict[str, Price]:
        """The default price table with `BOT_MODEL_PRICES` laid over it."""
        return {**DEFAULT_PRICES, **self.bot_model_prices}

    @property
    def cache_ttl(self) -> Literal["5m", "1h"] | None:
        """How long the API keeps the prompt cache; None sends no cache breakpoints at all."""
        return None if self.bot_prompt_cache == "off" else self.bot_prompt_cache

    @property
    def db_path(self) -> Path:
        return self.bot_data_dir / "bot.db"

    @property
    def work_root(self) -> Path:
        """Where `run_command` keeps each session's work dir (tools/sandbox.py `session_dir`)."""
        return self.bot_data_dir / "work"

    @property
    def database_url(self) -> str | None:
        """The PostgreSQL DSN in cluster mode, None in SQLite mode."""
        return self.bot_database_url.get_secret_value() if self.bot_database_url is not None else None

    @property
    def shell(self) -> ShellPolicy | None:
        """How `run_command` is fenced; None when the shell is off."""
        if not self.bot_enable_shell:
            return None
        return ShellPolicy(sandbox=self.bot_shell_sandbox, network=self.bot_shell_network, env_names=self.bot_shell_env)

    def require_sandbox(self) -> None:
        """Refuse a shell that would run unfenced: bwrap chosen (the default) but not installed; only an
        explicit `BOT_SHELL_SANDBOX=none` may choose that. Asked by the commands that run the agent and by
        `check`, not when the settings are read: `usage` and `migrate` never start a command."""
        if self.bot_enable_shell and self.bot_shell_sandbox is Sandbox.BWRAP and shutil.which("bwrap") is None:
            install = "install the Debian package bubblewrap, or set BOT_SHELL_SANDBOX=none"
            raise ConfigError(f"BOT_SHELL_SANDBOX: bwrap not found; {install}")

    @property
    def quotas(self) -> Quotas:
        return Quotas(
            max_reminders_per_user=self.bot_max_reminders_per_user,
            min_cron_interval_s=self.bot_min_cron_interval_s,
            max_reminder_chars=self.bot_max_reminder_chars,
            min_wait_s=self.bot_min_wait_s,
            max_concurrent_tools_per_user=self.bot_max_concurrent_tools_per_user,
            max_self_wakes_per_day=self.bot_max_self_wakes_per_day,
            daily_tokens_per_user=self.bot_daily_tokens_per_user,
            daily_tokens_per_channel=self.bot_daily_tokens_per_channel,
        )

    @property
    def heartbeat_enabled(self) -> bool:
        return self.bot_heartbeat_interval_s > 0 and bool(self.bot_heartbeat_channel)


def load_settings(**overrides: Any) -> Settings:
    """Read the settings, turning the first validation error into a `ConfigError` naming the variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        error = exc.errors()[0]
        variable = str(error["loc"][0]).upper() if error["loc"] else "configuration"
        message = str(error["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{variable}: {message}") from None
