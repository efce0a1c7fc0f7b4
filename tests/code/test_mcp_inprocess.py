"""The project's MCP server in-process (`serving.mcp_server.inprocess`), the executor of the
built-in dataset: it lists what the HTTP app lists and answers through the same call runner
(texts, tool errors, notes sessions, the unknown-tool protocol error). That it gives the same
dataset as a running server over HTTP is in tests/integration/test_toolrl_pack.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from serving.mcp_client.base import McpProtocolError
from serving.mcp_server.inprocess import InProcessServer
from serving.mcp_server.protocol import tool_list
from serving.tools import ToolContext, get_catalog


def test_lists_the_catalog_as_the_http_app_does() -> None:
    async def listed() -> list[dict[str, object]]:
        server = InProcessServer()
        try:
            return await server.list_tools()
        finally:
            await server.close()

    tools = asyncio.run(listed())
    assert [t["name"] for t in tools] == get_catalog().names
    expected = [
        t.model_dump(mode="json", by_alias=True, exclude_none=True)
        for t in tool_list(get_catalog())
    ]
    assert tools == expected
    assert all(set(t) == {"name", "description", "inputSchema"} for t in tools)


def test_answers_in_mock_mode_through_the_call_runner() -> None:
    async def calls() -> None:
        server = InProcessServer()
        try:
            done = await server.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
            reference = get_catalog().execute(
                "get_current_time", {"timezone": "Asia/Tokyo"}, ToolContext.reference(), "mock"
            )
            assert not done.is_error and json.loads(done.text) == reference  # frozen clock
            assert done.structured == reference
            bad = await server.call_tool("unit_converter", {"value": 1, "from_unit": "km"})
            assert bad.is_error and "to_unit" in bad.text  # a tool error, as over HTTP
            saved = await server.call_tool("save_note", {"title": "a", "content": "b"}, "s1")
            again = await server.call_tool("save_note", {"title": "c", "content": "d"}, "s1")
            other = await server.call_tool("save_note", {"title": "a", "content": "b"}, "s2")
            assert [json.loads(r.text)["notes_stored"] for r in (saved, again, other)] == [1, 2, 1]
            with pytest.raises(McpProtocolError, match="Unknown tool 'search_web'") as caught:
                await server.call_tool("search_web", {})
            assert caught.value.code == -32602
        finally:
            await server.close()

    asyncio.run(calls())
