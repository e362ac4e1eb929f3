"""The command line: `python -m bot` and the `threadbot` script are this.

Every command reads the configuration first; a bad value ends the program with
one line naming the variable and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence

from bot import __version__
from bot.config import Settings, load_settings
from bot.errors import ConfigError, StoreError, ThreadbotError
from bot.logs import configure_logging
from bot.variables import misspelt

log = logging.getLogger("bot")
QUIET = ("console", "oneshot")
"""Commands whose stderr a person reads next to their answers: warnings and errors only."""
AGENT_COMMANDS = ("run", "console", "oneshot", "check")
"""Commands that run the agent, or check what running it needs: they refuse a shell that would run unfenced."""

SLACK_ONLY = frozenset(
    {
        "bot_allowed_users",
        "bot_allowed_channels",
        "bot_admin_users",
        "bot_allowed_teams",
        "bot_cancel_reactions",
        "bot_heartbeat_interval_s",
        "bot_heartbeat_channel",
        "bot_heartbeat_active_hours",
        "bot_metrics_port",
        "bot_metrics_host",
        "bot_mention_only_channels",
        "bot_socket_ping_interval_s",
        "bot_socket_max_silence_s",
        "bot_slack_edits_per_minute",
        "bot_home_refresh_s",
        "bot_stop_flush_s",
        "bot_file_max_bytes",
        "bot_files_max_total_bytes",
        "bot_file_text_max_chars",
        "bot_upload_over_chars",
    }
)
"""Settings only the Slack daemon uses; the console and oneshot ignore them, as they ignore `SLACK_*`."""

COMMANDS = {
    "run": (
        "run the Slack daemon",
        "Run the Slack daemon: Socket Mode when SLACK_APP_TOKEN is set, otherwise the HTTP Events API on "
        "--port at /slack/events. It stops gracefully on SIGTERM or Ctrl-C, ending its log with a 'stopped' line.",
    ),
    "console": (
        "chat with the agent in this terminal",
        "Chat with the agent in this terminal, on the same engine as in Slack. Lines typed while tools run "
        "are injected into the running turn; Ctrl-C cancels the running tool calls. No Slack settings needed.",
    ),
    "oneshot": (
        "one turn, JSON on stdout",
        "Run one turn and print it as one JSON object on stdout. Without --wait-for-async it stops at the first "
        "background call and prints a continuation token for --resume. No Slack settings needed.",
    ),
    "check": (
        "check everything run needs, and say what is wrong",
        "Check everything run needs, each probe within 30 s: the configuration, BOT_DATA_DIR and the database "
        "(with BOT_DATABASE_URL: PostgreSQL answers and its schemas are current), "
        "the Slack tokens (auth.test, and apps.connections.open for SLACK_APP_TOKEN) and the model. Prints one "
        "line per check, naming the variable and the URL when something is wrong, and exits 1 if anything "
        "failed. It leaves no database behind where there was none.",
    ),
    "migrate": (
        "create or update the database's schema",
        "Apply the database's migrations and check them: the SQLite file in BOT_DATA_DIR, or with "
        "BOT_DATABASE_URL the PostgreSQL database, threadbot's schema and procrastinate's job queue (run only "
        "migrates threadbot's own schema there, and refuses to start without the job queue). Safe to repeat, and "
        "to run from several hosts at once.",
    ),
    "usage": (
        "tokens and estimated cost of the model calls",
        "Print the tokens of the model calls booked in the database (uncached input, output, cache reads and "
        "writes, the share read from the cache) and an estimated cost from the price table, one row per day, "
        "channel, user, model or session and model. --feedback prints instead how people rated the answers "
        "(their feedback buttons): 👍 and 👎 per model, and the latest ratings with who gave them and the turn.",
    ),
    "audit": (
        "the audit trail of tool calls",
        "Print every tool call kept in the database: when, which tool with which arguments, who asked, what "
        "decided it (the tool policy's rule, or the person who approved or denied it) and how it ended. --json "
        "prints one object per call and line.",
    ),
}
USAGE_VARIABLES = ("bot_data_dir", "bot_database_url", "bot_model_prices")
"""All `usage` reads: it opens the database and prices what it finds there."""
MIGRATE_VARIABLES = ("bot_data_dir", "bot_database_url")


def _variables(command: str) -> str:
    """The epilog of a command's `--help`: every variable it reads, straight from the settings' fields."""
    if command == "usage":
        names = list(USAGE_VARIABLES)
    elif command == "migrate":
        names = list(MIGRATE_VARIABLES)
    else:
        names = [name for name in Settings.model_fields if command in ("run", "check") or not _slack_only(name)]
    listed = ", ".join(name.upper() for name in names)
    return f"Reads, from the environment or from .env in the working directory: {listed}."


def _slack_only(name: str) -> bool:
    return name.startswith("slack_") or name in SLACK_ONLY


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="threadbot",
        description="Every Slack thread a Claude agent session. Run `threadbot COMMAND --help` for each command.",
    )
    parser.add_argument("--version", action="version", version=f"threadbot {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str) -> argparse.ArgumentParser:
        summary, description = COMMANDS[name]
        return commands.add_parser(name, help=summary, description=description, epilog=_variables(name))

    run = command("run")
    run.add_argument("--port", type=int, default=3000, help="HTTP mode port for /slack/events (default 3000)")

    console = command("console")
    console.add_argument("--session", default="default", help="session name; the conversation is kept per name")

    oneshot = command("oneshot")
    oneshot.add_argument("prompt", nargs="?", help="what to ask (optional with --resume)")
    oneshot.add_argument("--session", help="reuse a named session instead of a fresh one")
    oneshot.add_argument("--wait-for-async", action="store_true", help="wait for background tool calls")
    oneshot.add_argument("--resume", metavar="TOKEN", help="continue from a continuation token")
    oneshot.add_argument(
        "--approve", action="store_true", help="approve every call the tool policy asks about (else each is denied)"
    )
    oneshot.add_argument(
        "--answer",
        metavar="TEXT",
        help="answer the model's question (ask_user): the one the token's run left waiting, else the first one asked",
    )

    command("check")
    command("migrate")

    usage = command("usage")
    usage.add_argument("--since", default="7d", help="how far back: 30m, 24h, 7d, 2w or all (default 7d)")
    usage.add_argument(
        "--by", default="day", choices=["day", "channel", "user", "model", "session"], help="group rows (default day)"
    )
    usage.add_argument("--feedback", action="store_true", help="the answers' ratings per model instead of tokens")
    audit = command("audit")
    audit.add_argument("--since", default="7d", help="how far back: 30m, 24h, 7d, 2w or all (default 7d)")
    audit.add_argument("--user", help="only calls this Slack user id asked for")
    audit.add_argument("--tool", help="only this tool (a glob: mcp__github__*)")
    audit.add_argument("--json", action="store_true", help="one JSON object per call and line")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"threadbot: configuration error: {exc}", file=sys.stderr)
        return 2
    # A chat or a one-shot answer is not a daemon's log: only what needs the user's attention.
    configure_logging(settings.bot_log_format, level=logging.WARNING if args.command in QUIET else logging.INFO)
    for warning in misspelt(Settings.model_fields):
        log.warning("%s", warning)
    try:
        return asyncio.run(_dispatch(args, settings))
    except KeyboardInterrupt:
        return 130
    except ConfigError as exc:
        print(f"threadbot: configuration error: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        variable = "BOT_DATABASE_URL" if settings.database_url else "BOT_DATA_DIR"
        print(f"threadbot: {variable}: {exc}", file=sys.stderr)
        return 1
    except ThreadbotError as exc:
        print(f"threadbot: {exc}", file=sys.stderr)
        return 1


async def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.command in AGENT_COMMANDS:
        settings.require_sandbox()
    # Imported per command, so `console` and `oneshot` never load the Slack libraries.
    if args.command == "run":
        from bot.slack.daemon import serve

        await serve(settings, port=args.port)
        return 0
    if args.command == "console":
        from bot.console.chat import chat

        return await chat(settings, session=args.session)
    if args.command == "oneshot":
        return await _oneshot(args, settings)
    if args.command == "migrate":
        from bot.migrate import migrate_database

        return await migrate_database(settings)
    if args.command == "usage":
        from bot.usage_report import usage_report

        return await usage_report(settings, since=args.since, by=args.by, feedback=args.feedback)
    if args.command == "audit":
        from bot.audit_report import audit_report

        return await audit_report(settings, since=args.since, user=args.user, tool=args.tool, as_json=args.json)
    from bot.check import run_checks

    return await run_checks(settings)


async def _oneshot(args: argparse.Namespace, settings: Settings) -> int:
    from bot.console.oneshot import oneshot

    if not args.prompt and not args.resume:
        print(json.dumps({"error": "give a prompt, or --resume TOKEN"}))
        return 2
    try:
        report = await oneshot(
            settings,
            args.prompt,
            session=args.session,
            resume=args.resume,
            wait_for_async=args.wait_for_async,
            approve=args.approve,
            answer=args.answer,
        )
    except ThreadbotError as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    print(json.dumps(report, ensure_ascii=False, indent=2))
    return 1 if "error" in report else 0


if __name__ == "__main__":
    sys.exit(main())
