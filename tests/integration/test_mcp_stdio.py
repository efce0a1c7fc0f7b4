"""The stdio transport against real processes on real pipes: a fake server for each hostile
case (tests/integration/fake_mcp_stdio_server.py) and the two third-party servers."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from serving.mcp_client.base import McpClientError, McpProtocolError
from serving.mcp_client.stdio import StdioMcpClient
from testkit.mcp_servers import MEMORY_SERVER_BIN

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
FAKE = str(Path(__file__).with_name("fake_mcp_stdio_server.py"))
MEMORY_BIN = MEMORY_SERVER_BIN


def fake(
    mode: str, timeout_s: float = 10.0, log_path: Path | None = None, max_log_bytes: int = 1 << 20
) -> StdioMcpClient:
    """The fake server in `mode`, named `fake-MODE`."""
    return StdioMcpClient(
        f"fake-{mode}",
        sys.executable,
        [FAKE, mode],
        timeout_s=timeout_s,
        log_path=log_path,
        max_log_bytes=max_log_bytes,
    )


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


# --- third-party servers -------------------------------------------------------------------
def test_mcp_server_time_lists_and_answers_paris() -> None:
    async def scenario() -> None:
        async with StdioMcpClient("time", sys.executable, ["-m", "mcp_server_time"]) as client:
            tools = {tool["name"]: tool for tool in await client.list_tools()}
            assert {"get_current_time", "convert_time"} <= set(tools)
            assert tools["get_current_time"]["inputSchema"]["required"] == ["timezone"]
            result = await client.call_tool("get_current_time", {"timezone": "Europe/Paris"})
            assert not result.is_error
            assert result.structured["timezone"] == "Europe/Paris"
            assert result.structured["datetime"][-6:] in ("+01:00", "+02:00")
            wrong = await client.call_tool("get_current_time", {"timezone": "Mars/Olympus"})
            assert wrong.is_error and "Mars/Olympus" in wrong.text  # a tool error, no raise
            assert client.server_info["name"] == "mcp-time"

    run(scenario())


def test_server_memory_creates_and_finds_an_entity(tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the npm MCP server cannot run")
    assert MEMORY_BIN.exists(), (
        "run `make mcp-servers` (installs @modelcontextprotocol/server-memory)"
    )
    store = tmp_path / "memory.jsonl"
    env = {"PATH": os.environ["PATH"], "MEMORY_FILE_PATH": str(store)}

    async def scenario() -> None:
        async with StdioMcpClient("memory", str(MEMORY_BIN), env=env) as client:
            names = {tool["name"] for tool in await client.list_tools()}
            assert {"create_entities", "search_nodes", "read_graph"} <= names
            entity = {"name": "Ada", "entityType": "person", "observations": ["wrote a program"]}
            created = await client.call_tool("create_entities", {"entities": [entity]})
            assert not created.is_error
            found = await client.call_tool("search_nodes", {"query": "Ada"})
            assert [e["name"] for e in found.structured["entities"]] == ["Ada"]

    run(scenario())
    assert "Ada" in store.read_text()  # the server's own store, written by the server


# --- protocol ------------------------------------------------------------------------------
def test_pagination_and_concurrent_calls_multiplex_by_id() -> None:
    async def scenario() -> None:
        async with fake("ok") as client:
            names = [tool["name"] for tool in await client.list_tools()]
            assert names == ["echo", "crash", "get_current_time"]  # two pages, in order
            delays = [0.3 - i * 0.01 for i in range(30)]  # later calls finish first
            results = await asyncio.gather(
                *(
                    client.call_tool("echo", {"text": f"call-{i}", "delay_s": d})
                    for i, d in enumerate(delays)
                )
            )
            assert [r.text for r in results] == [f"call-{i}" for i in range(30)]
            with pytest.raises(McpProtocolError, match="-32601"):
                await client.request("resources/list")

    run(scenario())


def test_a_banner_on_stdout_is_tolerated() -> None:
    async def scenario() -> None:
        async with fake("banner") as client:
            assert (await client.call_tool("echo", {"text": "hi"})).text == "hi"

    run(scenario())


# --- hostile servers -----------------------------------------------------------------------
def test_missing_command_names_the_server() -> None:
    client = StdioMcpClient("ghost", "/nonexistent/mcp-server-ghost")
    with pytest.raises(McpClientError, match=r"MCP server 'ghost'.*not found"):
        run(client.list_tools())


def test_server_that_exits_at_once_reports_code_and_stderr() -> None:
    with pytest.raises(McpClientError) as caught:
        run(fake("exit").list_tools())
    message = str(caught.value)
    assert "MCP server 'fake-exit'" in message and "failed to start" in message
    assert "code 3" in message and "no licence key" in message


def test_garbage_on_stdout_fails_clearly_without_hanging() -> None:
    start = time.monotonic()
    with pytest.raises(McpClientError) as caught:
        run(fake("garbage", timeout_s=1.5).list_tools())
    message = str(caught.value)
    assert "MCP server 'fake-garbage'" in message
    assert "not JSON-RPC" in message and "this is not json-rpc" in message
    assert time.monotonic() - start < 10


def test_silent_server_times_out_and_is_stopped() -> None:
    async def scenario() -> None:
        client = fake("silent", timeout_s=1.0)
        start = time.monotonic()
        with pytest.raises(McpClientError, match=r"'fake-silent'.*did not answer initialize"):
            await client.list_tools()
        assert time.monotonic() - start < 8
        assert client._current is None or not client._current.alive  # killed, not leaked
        await client.close()

    run(scenario())


def test_crashed_server_fails_in_flight_calls_and_restarts_on_the_next() -> None:
    async def scenario() -> None:
        async with fake("ok") as client:
            assert (await client.call_tool("echo", {"text": "before"})).text == "before"
            slow = asyncio.create_task(client.call_tool("echo", {"text": "x", "delay_s": 5}))
            await asyncio.sleep(0.2)
            with pytest.raises(McpClientError) as caught:
                await client.call_tool("crash", {})
            message = str(caught.value)
            assert "MCP server 'fake-ok'" in message and "in flight" in message
            assert "code 7" in message and "crashing on purpose" in message
            with pytest.raises(McpClientError, match="in flight"):
                await slow  # the other in-flight call fails too, at once
            assert (await client.call_tool("echo", {"text": "after"})).text == "after"
            assert client.starts == 2

    run(scenario())


def test_stderr_is_captured_to_a_bounded_log(tmp_path: Path) -> None:
    log = tmp_path / "chatty.stderr.log"

    async def scenario() -> None:
        async with fake("chatty", log_path=log, max_log_bytes=512 * 1024) as client:
            await client.list_tools()
            await asyncio.sleep(0.5)  # let the stderr reader drain the 3 MiB
            assert (await client.call_tool("echo", {"text": "ok"})).text == "ok"
            assert len(client.stderr_tail()) <= 4_096

    run(scenario())
    rotated = log.with_name(log.name + ".1")
    assert rotated.exists()
    assert log.stat().st_size <= 512 * 1024 + 8_192
    assert rotated.stat().st_size <= 512 * 1024 + 8_192


def test_close_kills_a_server_that_ignores_stdin_and_sigterm() -> None:
    async def scenario() -> None:
        client = fake("stubborn")
        await client.initialize()
        assert client._current is not None
        proc = client._current.proc
        start = time.monotonic()
        await client.close()
        assert proc.returncode is not None
        assert time.monotonic() - start < 10
        with pytest.raises(McpClientError, match="closed"):
            await client.list_tools()

    run(scenario())


def test_a_looping_cursor_is_refused() -> None:
    async def scenario() -> None:
        async with fake("loop_cursor") as client:
            with pytest.raises(McpClientError, match="repeats cursor"):
                await client.list_tools()

    run(scenario())


def test_oversized_message_breaks_the_connection_cleanly(tmp_path: Path) -> None:
    script = tmp_path / "fake_huge.py"
    script.write_text(
        "import sys\nsys.stdin.readline()\nsys.stdout.write('{' + 'x' * (17 * 1024 * 1024))\n"
        "sys.stdout.flush()\nimport time\ntime.sleep(30)\n"
    )
    with pytest.raises(McpClientError, match="over 16777216 bytes"):
        run(StdioMcpClient("fake-huge", sys.executable, [str(script)]).list_tools())
