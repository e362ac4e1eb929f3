"""Slack's agent surface, built from the daemon's parts: the App Home, and the DM threads' prompts and titles."""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient

from bot.app import Core
from bot.config import Settings
from bot.slack.admission import Admission
from bot.slack.app import Identity
from bot.slack.home import HomeTab
from bot.slack.output import SlackEdge
from bot.slack.prompts import AgentThreads
from bot.store import Reminder
from bot.telemetry.metrics import Metrics


def agent_surface(
    settings: Settings,
    client: AsyncWebClient,
    core: Core,
    edge: SlackEdge,
    me: Identity,
    metrics: Metrics,
    admission: Admission,
) -> tuple[HomeTab, AgentThreads]:
    """The home tab reads everything from the store and cancels reminders through the scheduler (which tells
    the other replicas); who may cancel is the session's requesters, as `Sessions.requesters` knows them."""

    async def cancel_reminder(reminder_id: int, session_key: str) -> Reminder | None:
        return await core.scheduler.cancel(reminder_id, session_key=session_key)

    async def requesters(session_key: str) -> set[str]:
        return await edge.sessions.requesters(session_key)

    home = HomeTab(
        client=client,
        store=core.store,
        settings=settings,
        cancel_reminder=cancel_reminder,
        requesters=requesters,
        admission=admission,
        metrics=metrics,
        workspace_url=me.url,
        refresh_s=settings.bot_home_refresh_s,
    )
    threads = AgentThreads(
        client=client, prompts=settings.bot_suggested_prompts, bot_user_id=me.user_id, admission=admission
    )
    return home, threads
