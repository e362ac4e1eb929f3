"""The heartbeat: every BOT_HEARTBEAT_INTERVAL_S, look at HEARTBEAT.md and maybe do what it says.

It costs nothing when there is nothing to do: outside the active hours, or when
the file is missing or holds only headings and comments, no model call is made.
Otherwise one small decision call offers only the `heartbeat` tool (forced with
`tool_choice`): `skip` ends it there; `run` starts a normal agent turn in a new
session `heartbeat:<UTC time>` addressed to BOT_HEARTBEAT_CHANNEL, so tools,
progress and cancel work as in any thread, and people can reply to continue it.
The model is told to answer exactly HEARTBEAT_OK when there is nothing to
report; the edge then posts nothing (the address carries `quiet_reply`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from zoneinfo import ZoneInfo

from bot.config import ActiveHours
from bot.errors import ModelError
from bot.schedule.firing import Clock, Waker
from bot.schedule.timing import iso_utc, local_text
from bot.store import Store
from bot.types import JSON, Billing, ModelReply, ModelRequest, Provider

log = logging.getLogger(__name__)

HEARTBEAT_SESSION_PREFIX = "heartbeat:"

HEARTBEAT_OK = "HEARTBEAT_OK"
DECISION_MAX_TOKENS = 1024
HEARTBEAT_TOOL: dict[str, JSON] = {
    "name": "heartbeat",
    "description": "Decide what the heartbeat does now: skip (nothing due) or run the given tasks.",
    "input_schema": {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["skip", "run"]},
            "tasks": {
                "type": "array",
                "items": {"type": "string"},
                "description": "With run: the tasks to do now, each a short instruction. With skip: [].",
            },
        },
        "required": ["action", "tasks"],
    },
}
DECISION_SYSTEM = (
    "You decide whether threadbot's periodic heartbeat has work to do right now. The operator keeps standing "
    "tasks in HEARTBEAT.md; some are due only at certain times or intervals. Given the current time and when "
    "the heartbeat last ran, call the heartbeat tool: action 'skip' when nothing is due now, or action 'run' "
    "with just the tasks to do now."
)
_COMMENT = re.compile(r"<!--.*?(-->|\Z)", re.DOTALL)
_EMPTY_LINE = re.compile(r"\s*(#.*|[-*+]\s*(\[[ xX]?\]\s*)?|\d+[.)]\s*)?")


def tasks_in(markdown: str) -> str:
    """HEARTBEAT.md without HTML comments; "" when nothing but headings, blank lines or empty bullets is left."""
    text = _COMMENT.sub("", markdown).strip()
    if all(_EMPTY_LINE.fullmatch(line) for line in text.splitlines()):
        return ""
    return text


class Action(StrEnum):
    SKIP = "skip"
    RUN = "run"


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    tasks: list[str] = field(default_factory=list)


def decision_from(reply: ModelReply) -> Decision:
    """Read the forced `heartbeat` call; anything unreadable (or `run` with no task) counts as skip."""
    use = next((block for block in reply.tool_uses if block.get("name") == "heartbeat"), None)
    args = use.get("input") if use is not None else None
    if not isinstance(args, dict) or args.get("action") != Action.RUN:
        return Decision(Action.SKIP)
    raw = args.get("tasks")
    items = raw if isinstance(raw, list) else [raw]
    tasks = [str(item).strip() for item in items if item is not None and str(item).strip()]
    return Decision(Action.RUN, tasks) if tasks else Decision(Action.SKIP)


def run_prompt(tasks: list[str], now_text: str) -> str:
    listed = "\n".join(f"- {task}" for task in tasks)
    return (
        f"[heartbeat] It is {now_text}. The periodic heartbeat found these tasks from HEARTBEAT.md to do now:\n"
        f"{listed}\n\nDo them with your tools. Your answer is posted for the team. If, once done, there is "
        f"nothing worth telling anyone, answer exactly {HEARTBEAT_OK} and nothing else."
    )


class Outcome(StrEnum):
    OFF_HOURS = "off_hours"
    NO_TASKS = "no_tasks"
    SKIPPED = "skipped"
    RAN = "ran"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class TickResult:
    outcome: Outcome
    session_key: str | None = None


class Heartbeat:
    def __init__(
        self,
        *,
        path: Path,
        channel: str,
        zone: ZoneInfo,
        active_hours: ActiveHours | None,
        provider: Provider,
        store: Store,
        engine: Waker,
        clock: Clock,
    ) -> None:
        """Each run's prompt is stored as owed input before its turn starts, like a message: a process that
        dies during the run resumes it, and in a cluster the job of its thread takes it up on any replica."""
        self._path = path
        self._channel = channel
        self._zone = zone
        self._active_hours = active_hours
        self._provider = provider
        self._store = store
        self._engine = engine
        self._clock = clock
        self.last_run_at: datetime | None = None

    async def tick(self) -> TickResult:
        """One heartbeat: check the hours and the file, ask the model, maybe start a turn."""
        now = self._clock()
        if self._active_hours is not None and not self._active_hours.contains(now.astimezone(self._zone).time()):
            return TickResult(Outcome.OFF_HOURS)
        tasks_text = tasks_in(await asyncio.to_thread(_read, self._path))
        if not tasks_text:
            return TickResult(Outcome.NO_TASKS)
        try:
            reply = await self._provider.complete(self._decision_request(tasks_text, now))
        except ModelError as exc:
            log.warning("heartbeat decision failed: %s", exc)
            return TickResult(Outcome.FAILED)
        decision = decision_from(reply)
        if decision.action is Action.SKIP:
            return TickResult(Outcome.SKIPPED)
        key = f"{HEARTBEAT_SESSION_PREFIX}{iso_utc(now)}"
        address = {"edge": "slack", "channel": self._channel, "thread_ts": None, "quiet_reply": HEARTBEAT_OK}
        prompt = run_prompt(decision.tasks, local_text(now, self._zone))
        item = await self._store.claim_message([], key, prompt, address=address)
        assert item is not None  # no keys to have been seen
        self._engine.submit(key, prompt, inbox_id=item.id)
        self.last_run_at = now
        log.info("heartbeat started %s with %d task(s)", key, len(decision.tasks))
        return TickResult(Outcome.RAN, key)

    def _decision_request(self, tasks_text: str, now: datetime) -> ModelRequest:
        last = local_text(self.last_run_at, self._zone) if self.last_run_at else "not since the daemon started"
        content = (
            f"Current time: {local_text(now, self._zone)}.\nLast heartbeat run: {last}.\n\nHEARTBEAT.md:\n{tasks_text}"
        )
        return ModelRequest(
            system=DECISION_SYSTEM,
            messages=[{"role": "user", "content": [{"type": "text", "text": content}]}],
            tools=[HEARTBEAT_TOOL],
            tool_choice={"type": "tool", "name": "heartbeat"},
            max_tokens=DECISION_MAX_TOKENS,
            billing=Billing(f"{HEARTBEAT_SESSION_PREFIX}decision"),
        )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return ""
