"""`python -m bot check`: say plainly what is wrong before the daemon has to find out.

It asks what `run` will ask, through the same code: `auth.test` and `apps.connections.open` on
the daemon's own client, one request on the daemon's model client, the store's own migrations.
Each probe is bounded, so a server that accepts and never answers costs `timeout_s`, not minutes,
and they all run at once, so two such servers cost it once; each failure names the variable to
change, the URL that was asked and the cause. It creates nothing that
`run` would find: a database that does not exist yet is tried out in a scratch folder.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import anthropic

from bot.config import Settings
from bot.errors import ConfigError, ModelError, StoreError, ThreadbotError
from bot.mcp.check import check_mcp
from bot.model.client import anthropic_provider
from bot.operator_tools import SourcedTool, load_entry_point_tools, load_module_tools, unique_tools
from bot.policy import SHELL_TOOL, Asker, Policy, Verdict
from bot.slack import tokens
from bot.slack.app import build_client, meet_slack, slack_http_session
from bot.store import SqliteStore
from bot.store.modes import DIR_MODE, FILE_MODE, loose_modes
from bot.types import ModelRequest
from bot.variables import where_set
from tools import builtin_tools
from tools.sandbox import Sandbox, sandbox_problem

PROBE_TIMEOUT_S = 30.0
MODEL_CONNECT_TIMEOUT_S = 10.0
PROBE_SYSTEM = "This request only checks that the configuration works. Answer with one word."
ANTHROPIC_DEFAULT_URL = "https://api.anthropic.com"

Check = Callable[[Settings, float], Awaitable[str]]


async def check_database(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """`BOT_DATA_DIR` writable, and the database opens and migrates (a scratch copy if it does not exist yet);
    with `BOT_DATABASE_URL`, PostgreSQL answers and its schemas are what `run` needs (nothing is changed)."""
    folder = settings.bot_data_dir
    _require_writable(folder)
    if settings.database_url is not None:
        return await _check_postgres(settings.database_url, timeout_s)
    loose = loose_modes(settings.db_path)  # before the open, which tightens them
    try:
        async with asyncio.timeout(timeout_s):
            if settings.db_path.exists():
                await (await SqliteStore.open(settings.db_path)).close()
                warnings = "".join(f"\n! {line}; made {DIR_MODE:o}/{FILE_MODE:o} now" for line in loose)
                return f"database {settings.db_path} opens and is migrated{warnings}"
            with tempfile.TemporaryDirectory(prefix="threadbot-check-") as scratch:
                await (await SqliteStore.open(Path(scratch) / "bot.db")).close()
    except StoreError as exc:
        raise ThreadbotError(f"BOT_DATA_DIR: {exc}") from None
    except TimeoutError:
        raise ThreadbotError(f"BOT_DATA_DIR: {settings.db_path} did not open within {timeout_s:g}s") from None
    return f"BOT_DATA_DIR {folder.absolute()} can be written; run will create bot.db there"


async def _check_postgres(dsn: str, timeout_s: float) -> str:
    from bot.migrate import postgres_state  # psycopg is only loaded in cluster mode
    from bot.store.postgres import describe

    try:
        async with asyncio.timeout(timeout_s):
            state = await postgres_state(dsn)
    except StoreError as exc:
        raise ThreadbotError(f"BOT_DATABASE_URL: {exc}") from None
    except TimeoutError:
        raise ThreadbotError(f"BOT_DATABASE_URL: {describe(dsn)} did not answer within {timeout_s:g}s") from None
    if state.problem is not None:
        raise ThreadbotError(f"BOT_DATABASE_URL: PostgreSQL at {state.where}: {state.problem}")
    return f"PostgreSQL at {state.where} answers; schema version {state.version} is current, procrastinate's is there"


def _require_writable(folder: Path) -> None:
    """Try a file in the folder, or in the nearest parent that exists (`run` creates the rest); leave nothing."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"BOT_DATA_DIR: {folder} cannot be a folder, {existing} is a file")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".threadbot-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"BOT_DATA_DIR: cannot write in {existing} ({reason}); run keeps bot.db there") from None


async def check_slack(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """The bot token (`auth.test`) and the app token (`apps.connections.open`), as `run` starts with them."""
    if settings.slack_bot_token is None:
        raise ConfigError(f"SLACK_BOT_TOKEN: required for run. {tokens.hint(tokens.BOT)}")
    if settings.slack_app_token is None and settings.slack_signing_secret is None:
        raise ConfigError("SLACK_SIGNING_SECRET: required in HTTP mode (or set SLACK_APP_TOKEN for Socket Mode)")
    if (problem := tokens.token_problem(settings)) is not None:
        raise ConfigError(problem)
    app_token = settings.slack_app_token.get_secret_value() if settings.slack_app_token else None
    async with slack_http_session() as session:
        client = build_client(settings, session)
        me = await meet_slack(client, app_token, timeout_s)
    mode = "Socket Mode (SLACK_APP_TOKEN opens a connection)" if settings.slack_app_token else "HTTP mode"
    return f"Slack at {client.base_url}: bot {me.describe()}; {mode}"


async def check_model(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """One tiny request on the daemon's own model client. A failure names the variable to change, as the
    Slack line does: `ANTHROPIC_BASE_URL` when the API cannot be reached (and why), the key when it is refused."""
    url = settings.anthropic_base_url or ANTHROPIC_DEFAULT_URL
    where = f"ANTHROPIC_BASE_URL={url}" if settings.anthropic_base_url else url
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else ""
    if "..." in key or "…" in key:
        raise ConfigError(
            f"ANTHROPIC_API_KEY{where_set('ANTHROPIC_API_KEY')}: still the placeholder from .env.example; "
            "an API key is made at console.anthropic.com → API keys"
        )
    # The SDK's own read bound lies beyond the probe's, so a stalled answer always ends as "no answer within".
    connect_s = min(timeout_s, MODEL_CONNECT_TIMEOUT_S)
    timeout = anthropic.Timeout(2 * timeout_s, connect=connect_s)
    provider = anthropic_provider(settings, max_retries=1, timeout=timeout)
    request = ModelRequest(system=PROBE_SYSTEM, messages=[{"role": "user", "content": "ping"}], tools=[], max_tokens=1)
    try:
        async with asyncio.timeout(timeout_s):
            await provider.complete(request)
    except ModelError as exc:
        raise ThreadbotError(_model_failure(settings, url, where, exc, connect_s)) from None
    except TimeoutError:
        raise ThreadbotError(
            f"no answer from the model API at {url} (ANTHROPIC_BASE_URL) within {timeout_s:g}s"
        ) from None
    finally:
        await provider.close()
    return f"model {settings.bot_model} answers at {where}"


def _model_failure(settings: Settings, url: str, where: str, exc: ModelError, connect_s: float) -> str:
    """The SDK's error under the provider's user-facing one says who is to blame: the URL, or the key."""
    cause = exc.__cause__
    if isinstance(cause, anthropic.APIConnectionError):
        return f"cannot reach the model API at {url} (ANTHROPIC_BASE_URL): {_connection_cause(cause, connect_s)}"
    if isinstance(cause, anthropic.APIStatusError) and cause.status_code in (401, 403):
        variable = "ANTHROPIC_API_KEY" if settings.anthropic_api_key else "ANTHROPIC_AUTH_TOKEN"
        return (
            f"{variable}{where_set(variable)}: the model API at {url} refused it "
            f"(HTTP {cause.status_code}: {_api_message(cause)})"
        )
    return f"model {settings.bot_model} at {where}: {exc}"


def _api_message(exc: anthropic.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return str(message) if message else exc.message


def _connection_cause(exc: BaseException, connect_s: float) -> str:
    """Why a connection failed, in the words an operator acts on: refused, DNS, TLS, a timeout.

    The SDK's error wraps the transport's, which wraps the socket's (several, when a name has several
    addresses); the first one that says something specific wins."""
    seen: list[BaseException] = []
    pending: list[BaseException] = [exc]
    timed_out = False
    while pending:
        error = pending.pop(0)
        if error in seen:
            continue
        seen.append(error)
        # A transport may call any failure to connect a timeout (the aiohttp one of older SDKs does): a
        # specific cause further down the chain wins.
        timed_out = timed_out or isinstance(error, anthropic.APITimeoutError)
        if isinstance(error, ssl.SSLCertVerificationError):
            return f"TLS: {error.verify_message or error.reason}"
        if isinstance(error, ssl.SSLError) and hasattr(error, "reason"):
            # (aiohttp's own TLS errors are SSLErrors without a reason: the ssl module's error is their cause)
            return f"TLS: {error.reason or error}"
        if isinstance(error, socket.gaierror):
            return f"DNS: {error.strerror or error}"
        if isinstance(error, ConnectionRefusedError):
            return "connection refused"
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        pending.extend(cause for cause in (error.__cause__, error.__context__) if cause is not None)
    if timed_out:
        return f"no connection within {connect_s:g}s"
    specific = next((error.strerror for error in seen if isinstance(error, OSError) and error.strerror), None)
    return specific or str(seen[-1]) or type(seen[-1]).__name__


async def check_tools(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """The operator's tools load and clash with no other tool, as `run` will insist at its start."""
    operator = [*load_module_tools(settings.bot_tool_modules), *load_entry_point_tools()]
    builtin = [SourcedTool(item, "the built-in tools") for item in builtin_tools(shell=settings.shell)]
    unique_tools([*builtin, *operator])  # ConfigError naming both origins of a clash
    if not operator:
        return "no operator tools (BOT_TOOL_MODULES is empty and no package declares threadbot.tools)"
    return f"operator tools load: {', '.join(item.tool.name for item in operator)}"


def open_shell_warning(settings: Settings, policy: Policy) -> str | None:
    """The `!` line for a shell anyone the bot answers may use unasked, or None. It stands while every
    condition below holds, so each safeguard (an allow-list, an approval) is one entry that lifts it."""
    ruling = policy.rule_for(None, SHELL_TOOL, {"command": ""}, Asker(None))
    unguarded = {
        "the shell is on (BOT_ENABLE_SHELL=1)": settings.bot_enable_shell,
        "nobody is restricted (BOT_ALLOWED_USERS is empty)": not settings.bot_allowed_users,
        f"run_command needs no approval ({ruling.rule})": ruling.verdict is Verdict.ALLOW,
    }
    if not all(unguarded.values()):
        return None
    return f"! {', '.join(unguarded)}: everyone the bot answers can have it run commands"


async def check_shell(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """With the shell on, one empty command in the sandbox `run_command` will use, in a scratch work dir."""
    shell = settings.shell
    if shell is None:
        return "the shell is off (BOT_ENABLE_SHELL)"
    if shell.sandbox is Sandbox.NONE:
        return "the shell runs unsandboxed (BOT_SHELL_SANDBOX=none): commands see the daemon's files"
    with tempfile.TemporaryDirectory(prefix="threadbot-check-") as scratch:
        try:
            async with asyncio.timeout(timeout_s):
                problem = await sandbox_problem(shell, Path(scratch))
        except TimeoutError:
            problem = f"no answer within {timeout_s:g}s"
    if problem is not None:
        raise ThreadbotError(
            f"BOT_SHELL_SANDBOX: bwrap cannot build the sandbox here ({problem}); it needs user namespaces "
            "(see the README's \"The shell's sandbox\"), or set BOT_SHELL_SANDBOX=none where a container "
            "is the boundary"
        )
    network = "on" if shell.network else "off"
    return f"the shell runs under bwrap (network {network}, BOT_SHELL_NETWORK)"


async def check_policy(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """The tool policy reads, and what it says, in one screen; a warning when anyone may run commands unasked."""
    policy = Policy.load(settings.bot_policy_file)  # PolicyError names the file, the line and the rule
    lines = policy.describe()
    if (warning := open_shell_warning(settings, policy)) is not None:
        lines.append(warning)
    return "\n  ".join(lines)


CHECKS: dict[str, Check] = {
    "database": check_database,
    "slack": check_slack,
    "model": check_model,
    "tools": check_tools,
    "shell": check_shell,
    "mcp": check_mcp,
    "policy": check_policy,
}


async def run_checks(settings: Settings, *, timeout_s: float = PROBE_TIMEOUT_S) -> int:
    """Run every check at once (they ask different servers), print one line each in `CHECKS`' order as soon
    as it and those before it are done, exit non-zero when any failed. So a silent endpoint costs the
    bound once, however many there are."""
    print("✓ configuration is valid")
    probes = {name: asyncio.ensure_future(check(settings, timeout_s)) for name, check in CHECKS.items()}
    failures = 0
    try:
        for name, probe in probes.items():
            try:
                print(f"✓ {await probe}")
            except ThreadbotError as exc:
                failures += 1
                print(f"✗ {name}: {exc}", file=sys.stdout)
    finally:
        for probe in probes.values():
            probe.cancel()
        await asyncio.gather(*probes.values(), return_exceptions=True)
    return 1 if failures else 0
