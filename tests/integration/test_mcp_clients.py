"""Conformance: the official `mcp` client, the `fastmcp` client and the bridge's client
against a real server on loopback (2 workers), with auth off and on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import fastmcp
import httpx
import httpx2
import pytest
from fastmcp.client import StreamableHttpTransport
from fastmcp.exceptions import ToolError as FastMcpToolError
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from serving.mcp_client.base import McpClientError, McpProtocolError
from serving.mcp_client.http import McpHttpClient
from serving.mcp_server.config import ServerConfig
from serving.mcp_server.examples import EXAMPLE_CALLS
from serving.mcp_server.server import RunningServer, start
from serving.tools import get_catalog
from serving.tools.base import ToolContext

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with start(ServerConfig(port=0, workers=2, log_level="warning")) as running:
        yield running


@pytest.fixture(scope="module")
def auth_server() -> Iterator[RunningServer]:
    config = ServerConfig(port=0, workers=1, token=TOKEN, log_level="warning")
    with start(config) as running:
        yield running


def expected(name: str) -> dict[str, Any]:
    """Ground truth: the catalog run in the reference context (what mock mode must return)."""
    context = ToolContext.reference("expected")
    result: dict[str, Any] = {}
    for tool, args in EXAMPLE_CALLS.items():  # in order, so read_note sees save_note
        result = get_catalog().execute(tool, args, context, "mock")
        if tool == name:
            return result
    raise KeyError(name)


def assert_unauthorized(error: BaseException) -> None:
    """The server's 401 reached the client as the SDK's MCPError, whether the SDK raised it
    bare or inside its task group's ExceptionGroup: not some other failure."""
    pending, messages = [error], []
    while pending:
        current = pending.pop()
        if isinstance(current, MCPError):
            messages.append(str(current))
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend(e for e in (current.__cause__,) if e is not None)
    assert any("missing or invalid bearer token" in m for m in messages), repr(error)


# --- official mcp client --------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_official_client_lists_and_calls_every_tool(server: RunningServer, mode: str) -> None:
    async def scenario() -> None:
        async with Client(server.url, mode=mode) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == set(get_catalog().names)
            weather = next(t for t in listed.tools if t.name == "get_current_weather")
            assert weather.input_schema["required"] == ["location"]
            meta = {"toolrl/session": f"official-{mode}"}
            for name, args in EXAMPLE_CALLS.items():
                result = await client.call_tool(name, args, meta=meta)  # type: ignore[arg-type]
                assert not result.is_error, (name, result.content)
                assert json.loads(result.content[0].text) == expected(name)  # type: ignore[union-attr]
                assert result.structured_content == expected(name)
            bad = await client.call_tool("calculate_math", {"expression": 12})
            assert bad.is_error
            assert "argument 'expression' must be a string" in bad.content[0].text  # type: ignore[union-attr]
            with pytest.raises(MCPError, match="Unknown tool 'nope'"):
                await client.call_tool("nope", {})

    asyncio.run(scenario())


def test_official_client_with_auth(auth_server: RunningServer) -> None:
    async def scenario() -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(headers=headers) as http:
            transport = streamable_http_client(auth_server.url, http_client=http)
            async with Client(transport) as client:
                result = await client.call_tool("calculate_math", {"expression": "6*7"})
                assert not result.is_error and result.structured_content["result"] == "42"
        with pytest.raises((MCPError, ExceptionGroup)) as refused:
            async with Client(auth_server.url) as client:
                await client.call_tool("calculate_math", {"expression": "6*7"})
        assert_unauthorized(refused.value)

    asyncio.run(scenario())


# --- fastmcp client --------------------------------------------------------------------------
def test_fastmcp_client_lists_and_calls_every_tool(server: RunningServer) -> None:
    async def scenario() -> None:
        transport = StreamableHttpTransport(server.url, headers={"X-Toolrl-Session": "fastmcp"})
        async with fastmcp.Client(transport) as client:
            tools = await client.list_tools()
            assert {t.name for t in tools} == set(get_catalog().names)
            for name, args in EXAMPLE_CALLS.items():
                result = await client.call_tool(name, args)
                assert not result.is_error
                assert result.structured_content == expected(name)
            with pytest.raises(FastMcpToolError, match="must be a string"):
                await client.call_tool("calculate_math", {"expression": 12})
            failed = await client.call_tool("read_note", {"title": "?"}, raise_on_error=False)
            assert failed.is_error and "no note titled" in failed.content[0].text

    asyncio.run(scenario())


def test_fastmcp_client_with_auth(auth_server: RunningServer) -> None:
    async def scenario() -> None:
        async with fastmcp.Client(auth_server.url, auth=TOKEN) as client:
            result = await client.call_tool("calculate_math", {"expression": "6*7"})
            assert result.structured_content == {"expression": "6*7", "result": "42"}
        with pytest.raises((MCPError, ExceptionGroup)) as refused:
            async with fastmcp.Client(auth_server.url, auth="wrong") as client:
                await client.list_tools()
        assert_unauthorized(refused.value)

    asyncio.run(scenario())


# --- bridge client ---------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["auto", "legacy"])
def test_bridge_client_lists_and_calls_every_tool(server: RunningServer, protocol: str) -> None:
    async def scenario() -> None:
        client = McpHttpClient(server.url, protocol=protocol)  # type: ignore[arg-type]
        try:
            tools = await client.list_tools()
            assert {t["name"] for t in tools} == set(get_catalog().names)
            assert client.protocol_version == ("2026-07-28" if protocol == "auto" else "2025-06-18")
            for name, args in EXAMPLE_CALLS.items():
                result = await client.call_tool(name, args, session=f"bridge-{protocol}")
                assert not result.is_error, result.text
                assert json.loads(result.text) == expected(name)
            bad = await client.call_tool("unit_converter", {"value": "3"}, session="x")
            assert bad.is_error and "must be a number" in bad.text
            with pytest.raises(McpProtocolError, match="Unknown tool"):
                await client.call_tool("nope", {})
        finally:
            await client.close()

    asyncio.run(scenario())


def test_bridge_client_with_auth(auth_server: RunningServer) -> None:
    async def scenario() -> None:
        good = McpHttpClient(auth_server.url, token=TOKEN)
        bad = McpHttpClient(auth_server.url, token="wrong")
        anonymous = McpHttpClient(auth_server.url)
        try:
            assert (await good.call_tool("calculate_math", {"expression": "1+1"})).text
            for client in (bad, anonymous):
                with pytest.raises(McpClientError, match="401"):
                    await client.call_tool("calculate_math", {"expression": "1+1"})
        finally:
            for client in (good, bad, anonymous):
                await client.close()

    asyncio.run(scenario())


def test_http_401_carries_www_authenticate(auth_server: RunningServer) -> None:
    response = httpx.post(auth_server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert httpx.get(auth_server.base_url + "/healthz").status_code == 200  # health stays open


def test_notes_follow_the_session_across_workers(server: RunningServer) -> None:
    """save_note and read_note of one session may land on different worker processes."""

    async def scenario() -> None:
        clients = [McpHttpClient(server.url) for _ in range(4)]  # separate connections
        try:
            for i in range(8):
                await clients[i % 4].call_tool(
                    "save_note", {"title": f"t{i}", "content": f"c{i}"}, session="conv-A"
                )
            for i in range(8):
                read = await clients[(i + 1) % 4].call_tool(
                    "read_note", {"title": f"t{i}"}, session="conv-A"
                )
                assert json.loads(read.text)["content"] == f"c{i}"
            other = await clients[0].call_tool("read_note", {"title": "t0"}, session="conv-B")
            assert other.is_error and "no note titled" in other.text
        finally:
            for client in clients:
                await client.close()

    asyncio.run(scenario())


def test_a_refused_token_runs_no_tool(auth_server: RunningServer) -> None:
    """A call with a missing or wrong token gets 401 and the tool never runs: a note it
    would have saved is not there for the authorised reader."""

    async def scenario() -> None:
        good = McpHttpClient(auth_server.url, token=TOKEN)
        refused = [McpHttpClient(auth_server.url, token="wrong"), McpHttpClient(auth_server.url)]
        try:
            for client in refused:
                with pytest.raises(McpClientError, match="401"):
                    await client.call_tool(
                        "save_note", {"title": "t", "content": "leak"}, session="refused"
                    )
            read = await good.call_tool("read_note", {"title": "t"}, session="refused")
            assert "leak" not in read.text
        finally:
            for client in (good, *refused):
                await client.close()

    asyncio.run(scenario())
