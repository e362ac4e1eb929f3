"""Unencodable input (lone surrogates, undecodable bytes) is replaced at the edge and the turn goes on.

Before, a user message holding `\\ud800` was answered "the model sent a tool call whose arguments are
not valid JSON": the request could not be encoded, and the provider blamed the model for it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anthropic
import pytest
from conftest import MODEL, Core
from fakes.anthropic_api import FakeAnthropic, Reply, tool_results, tool_use, user_texts
from test_console import bot_env, run_bot, typed

from bot.agent.fence import untrusted
from bot.errors import ModelError
from bot.model.anthropic import AnthropicProvider
from bot.text import REPLACEMENT, clean_json, clean_text
from bot.types import ModelRequest
from tools.base import ToolContext, tool

KEY = "test:bytes"


def test_clean_text_replaces_only_surrogates() -> None:
    assert clean_text("plain") == "plain"
    assert clean_text("café ☕ 😀") == "café ☕ 😀"
    assert clean_text("a\ud800b\udcffc") == f"a{REPLACEMENT}b{REPLACEMENT}c"
    clean_text("a\ud800").encode()  # encodable now


def test_clean_json_walks_keys_and_nested_values() -> None:
    value = {"k\ud800": ["x\udc80", {"n": 1, "s": "\udfff"}], "t": ("\ud801",), "none": None}
    assert clean_json(value) == {
        f"k{REPLACEMENT}": [f"x{REPLACEMENT}", {"n": 1, "s": REPLACEMENT}],
        "t": [REPLACEMENT],
        "none": None,
    }


async def test_the_provider_names_unencodable_text_as_the_cause(fake: FakeAnthropic) -> None:
    client = anthropic.AsyncAnthropic(base_url=fake.url, api_key="test", max_retries=0)
    provider = AnthropicProvider(model=MODEL, max_tokens=100, client=client)
    request = ModelRequest(system="", messages=[{"role": "user", "content": "hi \ud800"}], tools=[])
    try:
        expected = "the conversation holds text that cannot be encoded as UTF-8 ('\\ud800'); the request was not sent"
        with pytest.raises(ModelError, match=re.escape(expected)):
            await provider.complete(request)
    finally:
        await client.close()
    assert fake.requests == []


async def test_a_tool_result_with_surrogates_reaches_the_model_cleaned(core: Core, fake: FakeAnthropic) -> None:
    @tool("listing", "A directory listing with an undecodable file name.")
    async def listing(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return {"files": ["ok.txt", "bad\udcff.txt"]}

    core.toolbox.add(listing)
    use = tool_use("listing", {})
    fake.script(Reply.tools(use), Reply.text_only("Two files."))
    outcome = await core.engine.run_turn(KEY, "list the files")
    assert outcome is not None and outcome.text == "Two files." and outcome.error is None
    cleaned = json.dumps({"files": ["ok.txt", f"bad{REPLACEMENT}.txt"]}, ensure_ascii=False)
    assert tool_results(fake.requests[1])[use["id"]] == untrusted("tool", cleaned, name="listing")


async def test_console_input_with_undecodable_bytes(fake: FakeAnthropic, tmp_path: Path) -> None:
    fake.script(Reply.text_only("Read you."))
    env = bot_env(fake, tmp_path, LC_ALL="C.UTF-8", PYTHONIOENCODING="utf-8")  # strict UTF-8 stdin
    code, out, err = await run_bot("console", env=env, cwd=tmp_path, stdin=b"hello \xff\xfe there\n")
    assert code == 0, err
    assert "assistant: Read you." in out
    assert [typed(text) for text in user_texts(fake.requests[0])] == [f"hello {REPLACEMENT}{REPLACEMENT} there"]
    assert fake.rejections == []


async def test_oneshot_prompt_with_undecodable_bytes(fake: FakeAnthropic, tmp_path: Path) -> None:
    fake.script(Reply.text_only("Fine."))
    # A str argument with surrogateescape stand-ins is passed to the process as the raw bytes b"\xff".
    code, out, err = await run_bot("oneshot", "hi \udcff", env=bot_env(fake, tmp_path), cwd=tmp_path)
    assert code == 0, err
    report = json.loads(out)
    assert report["text"] == "Fine." and "error" not in report
    assert user_texts(fake.requests[0]) == [f"hi {REPLACEMENT}"]
