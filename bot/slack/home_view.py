"""A person's App Home, as a pure function of what the store holds for them.

Built with slack_sdk's own block and view models, so what is published is what Block Kit
accepts (a home tab holds at most 100 blocks: each list here is cut short with a line that
says how many more there are). Calls are worded like the status messages (`call_line`);
their Cancel button is the status message's own, so it goes through the same permission
check wherever it is pressed. A reminder's or a wait's Cancel carries its row id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from slack_sdk.models.blocks import (
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from bot.calls.summary import one_line
from bot.slack.render import CANCEL_ACTION, SECTION_MAX_CHARS, call_line, defuse, escape
from bot.store.open_work import ThreadSummary
from bot.store.reminders import Reminder, ReminderKind
from bot.toolcall import ToolCall

CANCEL_REMINDER_ACTION = "cancel_reminder"
MAX_CALLS = 30
MAX_REMINDERS = 30
MAX_THREADS = 10
"""Each list's share of the home tab's 100 blocks, with room for headers, dividers and the "more" lines."""
REMINDER_TEXT_CHARS = 200

Link = Callable[[dict[str, object]], str | None]
"""A session's address → a link to its thread, when the edge can make one."""


@dataclass(frozen=True, slots=True)
class PersonWork:
    """Everything the home tab shows one person, read from the store."""

    user: str
    calls: list[ToolCall]
    reminders: list[Reminder]
    threads: list[ThreadSummary]
    addresses: dict[str, dict[str, object]]
    """The session address of each call's and reminder's session, for their thread links."""
    tokens_this_week: int
    model_calls_this_week: int


def home_view(work: PersonWork, now: datetime, link: Link) -> View:
    """The home tab for `work.user` at `now`."""
    blocks: list[Block] = [HeaderBlock(text="What I'm doing for you", block_id="head")]
    blocks += _section("Running calls", "calls", [_call(call, now, work, link) for call in work.calls], MAX_CALLS)
    blocks += _section(
        "Waits and reminders",
        "reminders",
        [_reminder(reminder, work, link) for reminder in work.reminders],
        MAX_REMINDERS,
    )
    threads = [_thread(thread, now, link) for thread in work.threads]
    blocks += _section("Recent threads", "threads", threads, MAX_THREADS)
    blocks += [DividerBlock(block_id="usage:divider"), _usage(work)]
    return View(type="home", blocks=blocks, callback_id="threadbot_home")


def _section(title: str, name: str, rows: list[Block], limit: int) -> list[Block]:
    blocks: list[Block] = [DividerBlock(block_id=f"{name}:divider"), HeaderBlock(text=title, block_id=f"{name}:head")]
    if not rows:
        return [*blocks, _context(f"{name}:none", "Nothing right now.")]
    blocks += rows[:limit]
    if len(rows) > limit:
        blocks.append(_context(f"{name}:more", f"…and {len(rows) - limit} more"))
    return blocks


def _call(call: ToolCall, now: datetime, work: PersonWork, link: Link) -> Block:
    where = _where(work.addresses.get(call.session_key), link)
    text = f"{call_line(call, now)}\n{where}" if where else call_line(call, now)
    cancel = ButtonElement(text="Cancel", action_id=CANCEL_ACTION, value=call.id, style="danger")
    return SectionBlock(block_id=f"call:{call.id}"[:255], text=MarkdownTextObject(text=_fit(text)), accessory=cancel)


def _reminder(reminder: Reminder, work: PersonWork, link: Link) -> Block:
    what = "Wait" if reminder.kind is ReminderKind.WAKE else "Reminder"
    due = f"<!date^{int(reminder.due_at.timestamp())}^{{date_short_pretty}} {{time}}|{reminder.due_at.isoformat()}>"
    repeat = f" (repeats: `{escape(reminder.cron)}`)" if reminder.cron else ""
    said = defuse(escape(one_line(reminder.text, REMINDER_TEXT_CHARS)))
    text = f"*{what}* {due}{repeat}: {said}"
    where = _where(work.addresses.get(reminder.session_key), link)
    if where:
        text += f"\n{where}"
    cancel = ButtonElement(text="Cancel", action_id=CANCEL_REMINDER_ACTION, value=str(reminder.id), style="danger")
    return SectionBlock(block_id=f"reminder:{reminder.id}", text=MarkdownTextObject(text=_fit(text)), accessory=cancel)


def _thread(thread: ThreadSummary, now: datetime, link: Link) -> Block:
    where = _where(thread.address, link) or escape(thread.session_key)
    text = f"{where} — *{thread.state.value}*, active {_ago(now, thread.last_active)}"
    return SectionBlock(block_id=f"thread:{thread.session_key}"[:255], text=MarkdownTextObject(text=_fit(text)))


def _usage(work: PersonWork) -> Block:
    text = f"*This week:* {work.tokens_this_week:,} tokens over {work.model_calls_this_week:,} model calls."
    return SectionBlock(block_id="usage", text=MarkdownTextObject(text=text))


def _where(address: dict[str, object] | None, link: Link) -> str:
    if not address:
        return ""
    url = link(address)
    channel = address.get("channel")
    name = "a direct message" if str(channel).startswith("D") else f"<#{channel}>"
    return f"<{url}|thread> in {name}" if url else f"in {name}"


def _ago(now: datetime, then: datetime) -> str:
    seconds = max(0, int((now - then).total_seconds()))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return "just now"


def _context(block_id: str, text: str) -> Block:
    return ContextBlock(block_id=block_id, elements=[MarkdownTextObject(text=text)])


def _fit(text: str) -> str:
    return text if len(text) <= SECTION_MAX_CHARS else text[: SECTION_MAX_CHARS - 1] + "…"
