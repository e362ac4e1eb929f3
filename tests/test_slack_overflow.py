"""`SlackEdge` uploads: an answer too long for messages goes up as a file, and so does a file a tool shares."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakes.slack_api import FakeSlack, StoredMessage

from bot.slack.client import SlackClient
from bot.slack.edits import EditScheduler
from bot.slack.output import SlackEdge
from bot.store import SqliteStore, Store
from tools.base import SharedFile

KEY = "slack:T1:C1:100.000000"
WAIT_S = 10.0  # an upper bound: generous, so a loaded machine is slow, not failing
LIMIT = 5_000


@dataclass
class Rig:
    slack: FakeSlack
    edits: EditScheduler
    store: Store
    root: str
    make_edge: Callable[[float], SlackEdge]

    def posts(self) -> list[StoredMessage]:
        return self.slack.posts_in_thread("C1", self.root)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with FakeSlack() as slack:
        client = SlackClient(token="xoxb-test", base_url=slack.api_url)
        edits = EditScheduler(client, per_minute=6000, burst=100, min_interval_s=0.01)
        await edits.start()
        store = await SqliteStore.open(tmp_path / "bot.db")
        root = slack.user_message("C1", "<@UBOT> hi", user="U1")["ts"]
        address = {"edge": "slack", "team": "T1", "channel": "C1", "thread_ts": root, "requester": "U1"}
        await store.ensure_session(KEY, address)
        edges: list[SlackEdge] = []

        def make_edge(first_post_wait_s: float) -> SlackEdge:
            edge = SlackEdge(
                client, edits, store=store, team_id="T1", first_post_wait_s=first_post_wait_s, upload_over_chars=LIMIT
            )
            edges.append(edge)
            return edge

        try:
            yield Rig(slack, edits, store, root, make_edge)
        finally:
            for edge in edges:
                await edge.close(WAIT_S)
            await edits.close(WAIT_S)
            await store.close()


def long_answer(paragraphs: int = 12) -> str:
    return "\n\n".join(f"Part {i}: " + "lorem ipsum " * 60 for i in range(paragraphs))


async def test_a_long_answer_that_arrives_at_once_is_one_file_with_a_preview(rig: Rig) -> None:
    edge = rig.make_edge(30.0)
    text = long_answer()
    for start in range(0, len(text), 700):
        edge.text_delta(KEY, text[start : start + 700])
    edge.text_done(KEY)
    await edge.close(WAIT_S)
    [post] = rig.posts()
    [file] = rig.slack.files.uploaded("C1", rig.root)
    assert (file.name, file.text) == ("answer.md", text)
    assert post.text.startswith("Part 0: lorem ipsum") and post.text.endswith(
        f"📎 The whole answer ({len(text):,} characters) is in the attached file."
    )
    assert len(post.text) < 1_000


async def test_a_streamed_answer_stops_at_the_limit_and_the_whole_of_it_is_uploaded(rig: Rig) -> None:
    edge = rig.make_edge(0.0)
    text = long_answer()
    edge.text_delta(KEY, text[:3_000])
    await rig.slack.wait_for(lambda: rig.posts(), WAIT_S, "the first part")
    for start in range(3_000, len(text), 700):
        edge.text_delta(KEY, text[start : start + 700])
    edge.text_done(KEY)
    await edge.close(WAIT_S)
    await rig.edits.idle(WAIT_S)
    *shown, pointer = rig.posts()
    [file] = rig.slack.files.uploaded("C1", rig.root)
    assert file.text == text and pointer.text.startswith("📎 The answer goes on")
    shown_words = " ".join(m.text for m in shown).split()
    assert shown and shown_words == text.split()[: len(shown_words)]  # the start of the answer, sealed as shown
    assert sum(len(m.text) for m in shown) <= LIMIT + 700  # nothing past the limit was posted as messages


async def test_a_file_a_tool_shares_is_uploaded_in_the_thread(rig: Rig) -> None:
    edge = rig.make_edge(0.0)
    edge.file_shared(KEY, SharedFile("report.csv", b"a,b\n1,2\n", "text/csv"))
    await edge.close(WAIT_S)
    [file] = rig.slack.files.uploaded("C1", rig.root)
    assert (file.name, file.content, file.comment) == ("report.csv", b"a,b\n1,2\n", "📎 report.csv")


async def test_a_refused_upload_is_said_in_the_thread(rig: Rig) -> None:
    edge = rig.make_edge(0.0)
    rig.slack.fail("files.getUploadURLExternal", status=200, error="missing_scope")
    edge.file_shared(KEY, SharedFile("report.csv", b"a,b\n", "text/csv"))
    await edge.close(WAIT_S)
    [post] = rig.posts()
    assert post.text == "⚠️ Could not share report.csv here (missing_scope)."


async def test_a_file_from_a_heartbeat_opens_its_thread_first(rig: Rig) -> None:
    edge = rig.make_edge(0.0)
    await rig.store.ensure_session("heartbeat:C9", {"edge": "slack", "channel": "C9", "thread_ts": None})
    edge.file_shared("heartbeat:C9", SharedFile("disk.txt", b"95% full", "text/plain"))
    await edge.close(WAIT_S)
    opener, upload = rig.slack.messages("C9")
    [file] = rig.slack.files.uploaded("C9", opener.ts)
    assert (opener.text, opener.thread_ts, upload.thread_ts, file.text) == ("📎 disk.txt", None, opener.ts, "95% full")
