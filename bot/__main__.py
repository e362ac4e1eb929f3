"""The command line: `python -m bot` and the `threadbot` script are this.

Every command reads the configuration first; a bad value ends the program with
one line naming the variable and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence

from bot.config import Settings, load_settings
from bot.errors import ConfigError, ThreadbotError
from bot.logs import configure_logging


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="threadbot", description="Every Slack thread a Claude agent session.")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the Slack daemon (Socket Mode with SLACK_APP_TOKEN, else HTTP)")
    run.add_argument("--port", type=int, default=3000, help="HTTP mode port for /slack/events (default 3000)")

    console = commands.add_parser("console", help="chat with the agent in this terminal")
    console.add_argument("--session", default="default", help="session name; the conversation is kept per name")

    oneshot = commands.add_parser("oneshot", help="one turn, JSON on stdout")
    oneshot.add_argument("prompt", nargs="?", help="what to ask (optional with --resume)")
    oneshot.add_argument("--session", help="reuse a named session instead of a fresh one")
    oneshot.add_argument("--wait-for-async", action="store_true", help="wait for background tool calls")
    oneshot.add_argument("--resume", metavar="TOKEN", help="continue from a continuation token")

    commands.add_parser("check", help="validate configuration, database, Slack token and model")

    usage = commands.add_parser("usage", help="tokens and estimated cost of the model calls, from the database")
    usage.add_argument("--since", default="7d", help="how far back: 30m, 24h, 7d, 2w or all (default 7d)")
    usage.add_argument(
        "--by", default="day", choices=["day", "channel", "user", "model", "session"], help="group rows (default day)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"threadbot: configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.bot_log_format)
    try:
        return asyncio.run(_dispatch(args, settings))
    except KeyboardInterrupt:
        return 130
    except ConfigError as exc:
        print(f"threadbot: configuration error: {exc}", file=sys.stderr)
        return 2
    except ThreadbotError as exc:
        print(f"threadbot: {exc}", file=sys.stderr)
        return 1


async def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
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
    if args.command == "usage":
        from bot.usage_report import usage_report

        return await usage_report(settings, since=args.since, by=args.by)
    from bot.check import run_checks

    return await run_checks(settings)


async def _oneshot(args: argparse.Namespace, settings: Settings) -> int:
    from bot.console.oneshot import oneshot

    if not args.prompt and not args.resume:
        print(json.dumps({"error": "give a prompt, or --resume TOKEN"}))
        return 2
    try:
        report = await oneshot(
            settings, args.prompt, session=args.session, resume=args.resume, wait_for_async=args.wait_for_async
        )
    except ThreadbotError as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    print(json.dumps(report, ensure_ascii=False, indent=2))
    return 1 if "error" in report else 0


if __name__ == "__main__":
    sys.exit(main())
