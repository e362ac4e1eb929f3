"""MCP tool results as the model gets them."""

from __future__ import annotations

import base64

import mcp_types as types
import pytest

from bot.agent.protocol import late_result_blocks, tool_result_block
from bot.mcp.results import convert_result
from bot.toolcall import CallStatus, ToolCall
from tools.base import ToolError, result_blocks

PNG = base64.b64encode(b"\x89PNG fake").decode()


def result(*content: types.ContentBlock, structured: object = None, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=list(content), structured_content=structured, is_error=error)


def text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


def test_text_is_text_and_structured_content_is_json() -> None:
    assert convert_result(result(text("one"), text("two"))) == "one\ntwo"
    assert convert_result(result(text('{"area": 12}'), structured={"area": 12})) == {"area": 12}


def test_is_error_fails_the_call_with_the_servers_message() -> None:
    with pytest.raises(ToolError, match=r"^disk full$"):
        convert_result(result(text("disk full"), error=True))
    with pytest.raises(ToolError, match="without a message"):
        convert_result(result(error=True))


def test_images_become_image_blocks_and_other_content_notes() -> None:
    image = types.ImageContent(type="image", data=PNG, mime_type="image/png")
    tiff = types.ImageContent(type="image", data=PNG, mime_type="image/tiff")
    blob = types.EmbeddedResource(
        type="resource", resource=types.BlobResourceContents(uri="file:///a.bin", blob=PNG, mime_type="application/x")
    )
    converted = convert_result(result(text("look"), image, tiff, blob))
    blocks = result_blocks(converted)
    assert blocks is not None
    assert blocks[0] == {"type": "text", "text": "look"}
    assert blocks[1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    assert blocks[2]["text"] == "[image of type image/tiff, 9 bytes: a type the model cannot view]"
    assert blocks[3]["text"] == "[resource file:///a.bin: application/x, 9 bytes of binary data, not shown]"


def test_block_results_reach_the_model_as_blocks_truncated_like_text() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    call = ToolCall("toolu_1", "k", "t", "mcp__a__shot", {}, status=CallStatus.COMPLETED)
    call.result = {"tool_result_blocks": [{"type": "text", "text": "x" * 500}, image]}
    block = tool_result_block(call, max_chars=200)
    first, second = block["content"]
    opening = '<untrusted source="tool" name="mcp__a__shot">\n'
    assert first["text"].startswith(opening + "x" * 200) and first["text"].endswith("\n</untrusted>")
    assert "[truncated: 300 more characters not shown]" in first["text"]
    assert second == image
    note, late_image = late_result_blocks(call, max_chars=1_000)
    assert note["text"].startswith("[background tool result] mcp__a__shot") and "[image block]" in note["text"]
    assert late_image == image
