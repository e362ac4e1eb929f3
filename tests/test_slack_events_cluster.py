"""The router in a cluster, in process: a message with files is claimed and acked first, its files read after.

The router writes to a PostgreSQL store (a scratch schema) and hands the thread's job to a recording hook in
place of the cluster's queue; the files come from the fake Slack, whose downloads a test can hold.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from fakes.slack_api import FakeSlack, event_callback_body
from test_slack_events import WAIT_S, Rig, rig, rigs

from bot.agent.fence import said, untrusted
from bot.coordination import Alone
from bot.slack import events
from bot.slack.events import MessageRouter
from bot.slack.files import RESTARTED_WHILE_READING, TOO_SLOW
from bot.store import InboxItem
from bot.store.postgres import PostgresStore
from bot.types import Speaker

__all__ = ["rig", "rigs"]  # the fixtures, shared with test_slack_events

U1 = Speaker("U1", "user_u1")  # the fake's users.info name for U1


class Offers(Alone):
    """A replica's side of the seam as the router sees it: what the router queued, with the message as the
    transaction that queues it sees it."""

    def __init__(self, store: PostgresStore) -> None:
        super().__init__(store, exclusive=False)
        self.shared = True
        self.seen: list[list[Any]] = []

    async def offer_in(self, conn: psycopg.AsyncConnection[Any], session_key: str, ref: dict[str, str]) -> None:
        cursor = await conn.execute(
            "SELECT blocks FROM inbox WHERE session_key = %s AND reading_until IS NULL", (session_key,)
        )
        self.seen.append([row[0] for row in await cursor.fetchall()])

    async def relay(self, kind: str, body: dict[str, Any]) -> bool:
        raise AssertionError("not asked here")


@dataclass
class ClusterRig:
    slack: FakeSlack
    router: MessageRouter
    store: PostgresStore
    offers: Offers


@pytest.fixture
async def cluster_rig(rig: Rig, pg_jobs_dsn: str) -> AsyncIterator[ClusterRig]:
    store = await PostgresStore.open(pg_jobs_dsn)
    offers = Offers(store)
    router = MessageRouter(
        client=rig.client,
        store=store,
        engine=rig.core.engine,
        edge=rig.edge,
        sessions=rig.edge.sessions,
        settings=rig.core.settings,
        bot_user_id="UBOT",
        metrics=rig.metrics,
        coordination=offers,
    )
    try:
        yield ClusterRig(rig.slack, router, store, offers)
    finally:
        await router.close(1.0)
        await store.close()


async def share_notes(rig: ClusterRig) -> dict[str, Any]:
    notes = rig.slack.files.share("notes.md", "# Notes\n", "text/markdown", "markdown")
    event = rig.slack.files.attach(rig.slack.user_message("D1", "summarise"), notes)
    await rig.router.handle(event_callback_body(event))  # what bolt awaits before its ack
    return event


async def visible(rig: ClusterRig) -> list[InboxItem]:
    return [item for items in (await rig.store.open_inbox()).values() for item in items]


async def test_the_claim_returns_before_the_files_are_read_and_the_job_waits_for_them(cluster_rig: ClusterRig) -> None:
    rig = cluster_rig
    held = rig.slack.files.hold_downloads()
    event = await share_notes(rig)
    await rig.slack.wait_for(lambda: rig.slack.files.downloads, WAIT_S, "the download under way")
    assert rig.offers.seen == [] and await rig.store.open_inbox() == {}  # claimed, unseen, no job yet
    held.set()
    await rig.slack.wait_for(lambda: rig.offers.seen, WAIT_S, "the thread's job")
    await rig.router.close(WAIT_S)  # the offer is seen inside the transaction: let it commit
    notes = {"type": "text", "text": untrusted("file", "# Notes\n", name="notes.md")}
    whole = json.dumps([{"type": "text", "text": said(U1, "summarise", ts=event["ts"])}, notes])
    assert rig.offers.seen == [[whole]]  # queued in the transaction that made the message whole
    [item] = await visible(rig)
    assert item.content[1] == notes


async def test_files_that_take_too_long_are_noted_and_the_message_goes_on(
    cluster_rig: ClusterRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = cluster_rig
    monkeypatch.setattr(events, "READING_S", 0.5)
    rig.slack.files.hold_downloads()  # never answered
    await share_notes(rig)
    await rig.slack.wait_for(lambda: rig.offers.seen, WAIT_S, "the thread's job")
    await rig.router.close(WAIT_S)
    [item] = await visible(rig)
    assert item.content[1] == {"type": "text", "text": untrusted("file", f"(skipped: {TOO_SLOW})", name="notes.md")}


async def test_a_shutdown_while_files_are_read_hands_the_message_on_at_once(cluster_rig: ClusterRig) -> None:
    rig = cluster_rig
    rig.slack.files.hold_downloads()
    await share_notes(rig)
    await rig.slack.wait_for(lambda: rig.slack.files.downloads, WAIT_S, "the download under way")
    await rig.router.close(0.1)
    assert len(rig.offers.seen) == 1  # not left unseen until its deadline
    [item] = await visible(rig)
    skipped = untrusted("file", f"(skipped: {RESTARTED_WHILE_READING})", name="notes.md")
    assert item.content[1] == {"type": "text", "text": skipped}
