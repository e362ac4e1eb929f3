"""Slack files in and out, end to end: `python -m bot run` against the fake Slack and the fake Messages API.

The daemon and the helpers are those of test_e2e_slack (one daemon for this module, each test in its own
channel with its own scripted answers). Files are shared through the fake's files API, so the daemon
downloads them with its bot token like it would from Slack; uploads go through slack_sdk's files_upload_v2.
"""

from __future__ import annotations

import base64

import pytest
from daemon_rig import WAIT_S, World, bot_posts, mention, reply, wait_status, wait_text
from fakes.anthropic_api import Reply, tool_use, user_blocks, user_texts

from bot.agent.fence import said, untrusted
from bot.types import Speaker

pytestmark = [pytest.mark.timeout(60), pytest.mark.asyncio(loop_scope="module")]

U1 = Speaker("U1", "user_u1")  # the fake's users.info name for U1
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
PDF = b"%PDF-1.7\n1 0 obj\n<<>>\nendobj\n%%EOF\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_an_image_a_pdf_and_a_text_file_reach_the_model_as_their_blocks(world: World) -> None:
    slack, channel = world.slack, world.channel
    world.script.add("look at these", Reply.text_only("Seen them."), Reply.text_only("No."))
    files = [
        slack.files.share("chart.png", PNG, "image/png"),
        slack.files.share("spec.pdf", PDF, "application/pdf", "pdf"),
        slack.files.share("notes.md", "# Notes\n- one\n", "text/markdown", "markdown"),
    ]
    event = slack.files.attach(slack.mention(channel, "look at these"), *files)
    envelope = await slack.send_event(event)
    await slack.wait_ack(envelope)
    await wait_text(slack, channel, event["ts"], "Seen them.")
    downloads = len(slack.files.downloads)
    await slack.wait_ack(await slack.redeliver(envelope))  # a retry of a claimed event downloads nothing again
    await reply(slack, channel, event["ts"], "anything else?")  # handled after the retry: same thread, in order
    await wait_text(slack, channel, event["ts"], "No.")
    request = world.requests("look at these")[0]
    assert user_texts(request) == [
        said(U1, "look at these", ts=event["ts"]),
        untrusted("file", "(its image follows)", name="chart.png"),
        untrusted("file", "(its pdf follows)", name="spec.pdf"),
        untrusted("file", "# Notes\n- one\n", name="notes.md"),
    ]
    assert user_blocks(request, "image") == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)}}
    ]
    assert user_blocks(request, "document") == [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)},
            "title": "spec.pdf",
        }
    ]
    assert all(d.authorized for d in slack.files.downloads if d.file_id in {f["id"] for f in files})
    assert world.model.rejections == []
    assert len(slack.files.downloads) == downloads


async def test_a_too_big_and_an_unsupported_file_give_their_notes(world: World) -> None:
    slack, channel = world.slack, world.channel
    world.script.add("two odd files", Reply.text_only("Noted."))
    files = [
        slack.files.share("footage.png", PNG + bytes(6_000_000), "image/png"),  # over the 5 MB default
        slack.files.share("tools.zip", b"PK\x03\x04" + bytes(64), "application/zip", "zip"),
    ]
    event = slack.files.attach(slack.mention(channel, "two odd files"), *files)
    await slack.wait_ack(await slack.send_event(event))
    await wait_text(slack, channel, event["ts"], "Noted.")
    [request] = world.requests("two odd files")
    assert user_texts(request) == [
        said(U1, "two odd files", ts=event["ts"]),
        untrusted("file", "(skipped: too big (6.0 MB; the limit is 5.0 MB))", name="footage.png"),
        untrusted("file", "(skipped: unsupported type (application/zip))", name="tools.zip"),
    ]
    assert not [d for d in slack.files.downloads if d.file_id in {f["id"] for f in files}]


async def test_a_file_in_an_injection_reaches_the_model_mid_turn(world: World) -> None:
    slack, channel = world.slack, world.channel
    world.script.add(
        "wait and look", Reply.tools(tool_use("sleep_for", {"seconds": 30})), Reply.text_only("Got the log.")
    )
    event = await mention(slack, channel, "wait and look")
    await wait_status(slack, channel, event["ts"])
    log_file = slack.files.share("build.log", "step 1 ok\nstep 2 FAILED\n", "text/plain", "text")
    note = slack.files.attach(slack.user_message(channel, "here is the log", thread_ts=event["ts"]), log_file)
    await slack.wait_ack(await slack.send_event(note))
    await wait_text(slack, channel, event["ts"], "Got the log.")
    second = world.requests("wait and look")[1]
    assert user_texts(second)[-2:] == [
        "[mid-turn user note] " + said(U1, "here is the log", ts=note["ts"]),
        untrusted("file", "step 1 ok\nstep 2 FAILED\n", name="build.log"),
    ]
    await reply(slack, channel, event["ts"], "stop")  # end the background sleep


async def test_a_long_answer_is_uploaded_as_a_file_with_a_preview(world: World) -> None:
    slack, channel = world.slack, world.channel
    answer = "\n\n".join(f"Finding {i}: " + " ".join(f"detail{i}-{j}" for j in range(120)) for i in range(12))
    assert len(answer) > 12_000
    world.script.add("full audit", Reply.text_only(answer))
    event = await mention(slack, channel, "full audit")
    [file] = await slack.wait_for(lambda: slack.files.uploaded(channel, event["ts"]), WAIT_S, "the uploaded answer")
    assert (file.name, file.text) == ("answer.md", answer)
    *shown, post = bot_posts(slack, channel, event["ts"])
    assert post.text == file.comment
    if shown:  # the stream outlasted the first post's wait (a loaded machine): its start is shown, sealed
        [start] = shown
        assert answer.startswith(start.text.rstrip()) and start.text.startswith("Finding 0: detail0-0")
        assert (
            post.text == f"📎 The answer goes on; the whole of it ({len(answer):,} characters) is in the attached file."
        )
    else:
        assert post.text.startswith("Finding 0: detail0-0") and len(post.text) < 1_000
        assert post.text.endswith(f"📎 The whole answer ({len(answer):,} characters) is in the attached file.")


async def test_a_file_a_tool_returns_is_shared_in_the_thread(world: World) -> None:
    slack, channel = world.slack, world.channel
    csv = "region,sales\nnorth,10\nsouth,12\n"
    world.script.add(
        "export the sales",
        Reply.tools(tool_use("share_file", {"name": "sales.csv", "content": csv})),
        Reply.text_only("Here is the export."),
    )
    event = await mention(slack, channel, "export the sales")
    await wait_text(slack, channel, event["ts"], "Here is the export.")
    [file] = slack.files.uploaded(channel, event["ts"])
    assert (file.name, file.text, file.comment) == ("sales.csv", csv, "📎 sales.csv")
