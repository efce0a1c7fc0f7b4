"""Tool sources and the catalog against real servers: the project's MCP HTTP server, the
third-party stdio servers (mcp-server-time, @modelcontextprotocol/server-memory) and the fake
stdio server's hostile modes; plus `toolrl tools list` itself."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from serving.mcp_client.base import McpProtocolError
from serving.mcp_client.catalog import CatalogError, ToolCatalog
from serving.mcp_client.sources import ToolSources, load_tool_sources
from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import RunningServer, start
from serving.tools import get_catalog
from testkit.mcp_servers import MEMORY_SERVER_BIN
from training.pipeline.config import PipelineConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
FAKE = str(Path(__file__).with_name("fake_mcp_stdio_server.py"))
MEMORY_BIN = MEMORY_SERVER_BIN
TOKEN = "catalog-test-token"
TIME = {"command": sys.executable, "args": ["-m", "mcp_server_time"]}


def fake(mode: str, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [FAKE, mode], **extra}


def memory(store: Path) -> dict[str, Any]:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the npm MCP server cannot run")
    assert MEMORY_BIN.exists(), "run `make mcp-servers` (installs server-memory)"
    return {"command": str(MEMORY_BIN), "env": {"MEMORY_FILE_PATH": str(store)}}


def load(servers: dict[str, Any], environ: dict[str, str] | None = None) -> ToolCatalog:
    env = {"PATH": os.environ["PATH"], **(environ or {})}
    return ToolCatalog(ToolSources.model_validate({"servers": servers}), environ=env)


def problems_of(servers: dict[str, Any], environ: dict[str, str] | None = None) -> str:
    async def scenario() -> str:
        catalog = load(servers, environ)
        try:
            with pytest.raises(CatalogError) as caught:
                await catalog.load()
            return str(caught.value)
        finally:
            await catalog.close()

    return asyncio.run(scenario())


@pytest.fixture(scope="module")
def project_server() -> Iterator[RunningServer]:
    config = ServerConfig(port=0, workers=1, token=TOKEN, log_level="warning")
    with start(config) as running:
        yield running


# --- third-party servers together ----------------------------------------------------------
def test_time_and_memory_form_one_catalog_and_calls_are_routed(tmp_path: Path) -> None:
    async def scenario() -> None:
        catalog = load({"time": TIME, "memory": memory(tmp_path / "graph.jsonl")})
        try:
            entries = {entry.name: entry for entry in await catalog.load()}
            assert entries["get_current_time"].server == "time"
            assert entries["create_entities"].server == "memory"
            assert entries["convert_time"].required == (
                "source_timezone",
                "time",
                "target_timezone",
            )
            paris = await catalog.call_tool("get_current_time", {"timezone": "Europe/Paris"})
            assert paris.structured["timezone"] == "Europe/Paris"
            entity = {"name": "Paris", "entityType": "city", "observations": ["capital"]}
            await catalog.call_tool("create_entities", {"entities": [entity]})
            graph = await catalog.call_tool("read_graph", {})
            assert [e["name"] for e in graph.structured["entities"]] == ["Paris"]
            with pytest.raises(McpProtocolError, match="Unknown tool: nope"):
                await catalog.call_tool("nope", {})
        finally:
            await catalog.close()

    asyncio.run(scenario())


# --- the project's HTTP server beside a stdio one ------------------------------------------
def test_project_server_and_stdio_combine_with_a_prefix(project_server: RunningServer) -> None:
    servers = {
        "toolrl": {"url": project_server.url, "token_env": "CATALOG_TOKEN"},
        "time": {**TIME, "prefix": "time_"},
    }

    async def scenario() -> None:
        catalog = load(servers, {"CATALOG_TOKEN": TOKEN})
        try:
            entries = {entry.name: entry for entry in await catalog.load()}
            ours = {name for name, e in entries.items() if e.server == "toolrl"}
            assert ours == set(get_catalog().names)
            assert entries["time_get_current_time"].tool.name == "get_current_time"
            assert entries["time_get_current_time"].server == "time"
            theirs = await catalog.call_tool("time_get_current_time", {"timezone": "Asia/Tokyo"})
            assert theirs.structured["timezone"] == "Asia/Tokyo"  # mcp-server-time's shape
            builtin = await catalog.call_tool(
                "get_current_time", {"timezone": "Asia/Tokyo"}, session="s1", seq=0
            )
            assert not builtin.is_error and "Asia/Tokyo" in builtin.text
            names = [tool["name"] for tool in await catalog.list_tools()]
            assert len(names) == len(set(names)) == len(get_catalog().names) + 2
        finally:
            await catalog.close()

    asyncio.run(scenario())


def test_a_clash_without_prefix_is_refused_naming_both(project_server: RunningServer) -> None:
    message = problems_of(
        {"toolrl": {"url": project_server.url, "token_env": "T"}, "time": TIME}, {"T": TOKEN}
    )
    assert "'get_current_time'" in message
    assert "'toolrl' and 'time'" in message and "prefix" in message


def test_a_missing_token_is_named(project_server: RunningServer) -> None:
    message = problems_of({"toolrl": {"url": project_server.url, "token_env": "UNSET_TOKEN"}})
    assert f"MCP server 'toolrl' ({project_server.url})" in message
    assert "401" in message and "$UNSET_TOKEN, which is not set" in message


# --- failing sources -----------------------------------------------------------------------
def test_down_and_slow_servers_are_each_named() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens there
    down = f"http://127.0.0.1:{port}/mcp"
    start_s = time.monotonic()
    message = problems_of(
        {
            "down": {"url": down, "timeout_s": 2},
            "slow": fake("silent", timeout_s=1),
            "ghost": {"command": "/nonexistent/mcp-ghost"},
            "fine": fake("ok"),
        }
    )
    assert time.monotonic() - start_s < 20
    lines = message.splitlines()
    assert any(f"MCP server 'down' ({down})" in line and "cannot reach" in line for line in lines)
    assert any(
        "'slow'" in line and "did not answer initialize within 1 s" in line for line in lines
    )
    assert any("'ghost'" in line and "not found" in line for line in lines)
    assert not any("'fine'" in line for line in lines)


def test_invalid_schemas_are_refused_naming_server_and_tool() -> None:
    message = problems_of({"evil": fake("bad_schemas")})
    assert "MCP server 'evil': tool name 'has space'" in message
    assert "tool 'not_object': inputSchema.type must be \"object\"" in message
    assert "tool 'int_description': description must be a string" in message
    assert "tool 'huge_description': description is 100000 characters" in message
    assert "tool 'too_deep': inputSchema nests deeper than 16 levels" in message
    assert "tool 'bad_type': inputSchema.required must be a list" in message


def test_a_name_no_openai_client_accepts_is_refused() -> None:
    message = problems_of({"dots": fake("dotted")})
    assert "MCP server 'dots', tool 'ns.echo'" in message and "OpenAI" in message


def test_an_unset_secret_for_a_stdio_server_is_named() -> None:
    message = problems_of({"needs": fake("ok", env_from={"API_KEY": "NOT_SET_ANYWHERE"})})
    assert "MCP server 'needs': env_from API_KEY needs $NOT_SET_ANYWHERE" in message


def test_stdio_servers_do_not_inherit_our_secrets(tmp_path: Path) -> None:
    script = tmp_path / "fake_env_server.py"
    script.write_text(
        "import json, os, sys\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    if 'id' not in m: continue\n"
        "    r = {'protocolVersion': '2025-06-18', 'capabilities': {}, 'serverInfo': {}}\n"
        "    if m['method'] == 'tools/list': r = {'tools': [{'name': 'env', 'inputSchema': "
        "{'type': 'object'}, 'description': json.dumps(sorted(os.environ))}]}\n"
        "    print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': r}), flush=True)\n"
    )

    async def scenario() -> list[str]:
        catalog = load(
            {"env": {"command": sys.executable, "args": [str(script)], "env": {"MODE": "x"}}},
            {"TOOLRL_MCP_TOKEN": "secret", "HOME": "/tmp"},
        )
        try:
            (entry,) = await catalog.load()
            return list(json.loads(entry.description))
        finally:
            await catalog.close()

    names = asyncio.run(scenario())
    assert "TOOLRL_MCP_TOKEN" not in names
    assert {"PATH", "HOME", "MODE"} <= set(names)


# --- config ----------------------------------------------------------------------------------
def test_an_mcp_clients_block_can_be_pasted(tmp_path: Path) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": "uvx", "args": ["mcp-server-time"]},
                    "remote": {"url": "https://tools.example.com/mcp"},
                }
            }
        )
    )
    sources = load_tool_sources(path)
    assert [s.transport for s in sources.servers.values()] == ["stdio", "http"]
    assert ToolSources().servers["toolrl"].transport == "http"  # the default: our server


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        ({"url": "https://x/mcp", "headers": {"Authorization": "Bearer s"}}, "token_env"),
        ({"url": "https://x/mcp", "token_env": "s3cret-token!"}, "token_env"),
        ({"command": "x", "tokn": 1}, "Extra inputs are not permitted"),
        ({"args": ["x"]}, "needs `command` (stdio) or `url` (http)"),
        ({"url": "ftp://x"}, "url"),
        ({"command": "x", "prefix": "bad prefix"}, "prefix"),
    ],
)
def test_bad_sources_are_refused(server: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(expected)):
        ToolSources.model_validate({"servers": {"s": server}})


def test_the_pipeline_config_carries_tool_sources() -> None:
    config = PipelineConfig.model_validate({"tool_sources": {"servers": {"time": TIME}}})
    assert config.tool_sources.servers["time"].transport == "stdio"
    assert PipelineConfig().tool_sources.servers["toolrl"].transport == "http"


# --- the command -----------------------------------------------------------------------------
def test_tools_list_prints_the_catalog_and_fails_with_exit_2(tmp_path: Path) -> None:
    from training.cli import app

    good = tmp_path / "sources.yaml"
    good.write_text(yaml.safe_dump({"servers": {"time": TIME, "fake": fake("ok", prefix="f_")}}))
    runner = CliRunner()
    result = runner.invoke(app, ["tools", "list", "--sources", str(good), "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert listed["servers"]["fake"] == {"transport": "stdio", "prefix": "f_", "tools": 3}
    echo = next(tool for tool in listed["tools"] if tool["name"] == "f_echo")
    assert echo["server_tool"] == "echo" and echo["required"] == ["text"]
    table = runner.invoke(app, ["tools", "list", "--sources", str(good)])
    assert table.exit_code == 0 and "get_current_time" in table.stdout
    assert "Echo the text back." in table.stdout and "Second line" not in table.stdout

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"servers": {"time": TIME, "broken": fake("exit")}}))
    failed = runner.invoke(app, ["tools", "list", "--sources", str(bad)])
    assert failed.exit_code == 2
    assert "MCP server 'broken'" in failed.stderr and "no licence key" in failed.stderr


# --- the agent loop on a third-party server -------------------------------------------------
def test_the_agent_loop_calls_a_stdio_server_through_the_catalog() -> None:
    """The loop evaluation and the front door run, given the catalog as its ToolExecutor: the
    model sees the prefixed name, the call reaches mcp-server-time under its own name."""
    from serving.agent import Agent, AgentConfig, ChatClient, EndpointBackend
    from training.evaluation.scripted import Scripted, serve_in_thread

    seen: list[list[str]] = []

    def model(messages: Any, tools: Any) -> Scripted:
        seen.append([tool["function"]["name"] for tool in tools])
        if not any(message["role"] == "tool" for message in messages):
            return Scripted(calls=[("time_get_current_time", {"timezone": "Europe/Paris"})])
        return Scripted(content="It is late in Paris.")

    async def scenario(url: str) -> Any:
        catalog = load({"time": {**TIME, "prefix": "time_"}})
        chat = ChatClient(url, "m")
        try:
            agent = Agent(EndpointBackend(chat), catalog, AgentConfig())
            return await agent.run([{"role": "user", "content": "Time in Paris?"}], session="s")
        finally:
            await chat.close()
            await catalog.close()

    with serve_in_thread(model) as url:
        trajectory = asyncio.run(scenario(url))
    assert seen[0] == ["time_get_current_time", "time_convert_time"]
    (call,) = trajectory.calls
    assert not call.result_is_error and '"timezone": "Europe/Paris"' in call.result
    assert trajectory.final_answer == "It is late in Paris."
