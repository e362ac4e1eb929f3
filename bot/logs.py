"""Logging set-up: readable text for people, one JSON object a line for collectors."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "fields", {}))  # a record's structured fields (the audit's), as its own
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(log_format: str, *, level: int = logging.INFO) -> None:
    """Logs go to stderr so stdout stays clean for the console and oneshot's JSON."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    # Client libraries log every request at INFO; that is noise in a daemon's log.
    for noisy in ("httpx", "httpx2", "anthropic", "slack_bolt", "slack_sdk", "apscheduler", "aiosqlite"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
