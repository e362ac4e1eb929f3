"""Files inside the engine: a mid-turn note that carries blocks, and a file a tool hands to the session's edge."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
from conftest import CoreFactory, RecordingOutput
from fakes.anthropic_api import FakeAnthropic, Reply, tool_results, tool_use

from bot.agent import protocol
from bot.agent.protocol import INJECTION_PREFIX
from bot.app import Core
from bot.console.oneshot import CollectingOutput, _report
from bot.console.output import ConsoleOutput
from bot.toolcall import CallStatus
from tools.base import SharedFile, ToolContext, ToolError
from tools.share_file import share_file

KEY = "test:files"
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}


async def test_a_note_with_an_image_reaches_the_model_mid_turn(
    core_factory: CoreFactory, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    core = await core_factory(bot_yield_on_injection=False)
    sleep = tool_use("sleep_for", {"seconds": 0.5})
    fake.script(Reply.tools(sleep), Reply.text_only("A cat."))
    assert core.engine.submit(KEY, "sleep a bit").value == "started"
    await output.wait_status(sleep["id"], CallStatus.RUNNING)
    note = [{"type": "text", "text": "and what is this?"}, {"type": "text", "text": "[file cat.png]"}, IMAGE]
    assert core.engine.submit(KEY, note).value == "injected"
    await output.wait_turns(KEY, 1)
    assert fake.requests[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": sleep["id"], "content": "slept for 0.5s"},
        {"type": "text", "text": f"{INJECTION_PREFIX} and what is this?"},
        {"type": "text", "text": "[file cat.png]"},
        IMAGE,
    ]
    assert fake.rejections == []


def test_injection_blocks_label_every_kind_of_note() -> None:
    assert protocol.injection_blocks(["plain", [IMAGE]]) == [
        {"type": "text", "text": f"{INJECTION_PREFIX} plain"},
        {"type": "text", "text": INJECTION_PREFIX},
        IMAGE,
    ]


async def test_a_tool_shares_a_file_with_the_sessions_edge(
    core: Core, fake: FakeAnthropic, output: RecordingOutput
) -> None:
    share = tool_use("share_file", {"name": "../out/report.csv", "content": "a,b\n1,2\n"})
    fake.script(Reply.tools(share), Reply.text_only("Shared."))
    await core.engine.run_turn(KEY, "give me the csv")
    assert output.files == [(KEY, SharedFile("report.csv", b"a,b\n1,2\n", "text/csv"))]
    assert tool_results(fake.requests[1]) == {share["id"]: '{"shared": "report.csv", "bytes": 8}'}


async def test_without_an_edge_sharing_is_a_clear_tool_error(tmp_path: Path) -> None:
    ctx = ToolContext("toolu_x", KEY, tmp_path, lambda kind, payload: None, asyncio.get_running_loop())
    with pytest.raises(ToolError, match="cannot be shared"):
        await share_file.invoke({"name": "a.txt", "content": "x"}, ctx)
    with pytest.raises(ToolError, match="a file name"):
        share_file.run({"name": "../", "content": "x"}, ctx)


def test_the_console_saves_a_shared_file_and_prints_where(tmp_path: Path) -> None:
    screen = io.StringIO()
    console = ConsoleOutput(screen, files_dir=tmp_path / "files")
    console.file_shared(KEY, SharedFile("report.md", b"# one", "text/markdown"))
    console.file_shared(KEY, SharedFile("report.md", b"# two", "text/markdown"))
    assert (tmp_path / "files" / "report.md").read_bytes() == b"# one"
    assert (tmp_path / "files" / "report-2.md").read_bytes() == b"# two"
    assert screen.getvalue().splitlines()[-1] == f"📎 report.md (5 bytes) saved to {tmp_path / 'files' / 'report-2.md'}"


def test_oneshot_lists_the_files_it_saved(tmp_path: Path) -> None:
    collected = CollectingOutput(files_dir=tmp_path)
    collected.file_shared(KEY, SharedFile("out.txt", b"hi"))
    assert _report(KEY, collected, None)["files"] == [str(tmp_path / "out.txt")]
