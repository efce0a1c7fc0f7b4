"""The bridge end to end on CPU: live server -> generated tool config -> verl's own loader
-> calls executed through verl's tool objects."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Coroutine, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
import yaml

from serving.mcp_client.http import close_pooled_clients
from serving.mcp_server.config import FaultConfig, ServerConfig
from serving.mcp_server.examples import EXAMPLE_CALLS
from serving.mcp_server.server import RunningServer, start
from serving.tools import get_catalog
from serving.tools.base import ToolContext
from training.verl_bridge.tool_config import write_tool_config

T = TypeVar("T")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
verl_registry = pytest.importorskip("verl.tools.tool_registry")


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with start(ServerConfig(port=0, workers=2, log_level="warning")) as running:
        yield running


@pytest.fixture(scope="module")
def tools(server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("verl") / "tool_config.yaml"
    report = write_tool_config(server.url, path)
    assert any("dropped" in line for line in report.changes)
    loaded = verl_registry.initialize_tools_from_config(str(path))
    return {tool.name: tool for tool in loaded}


def run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, then close the loop's pooled bridge clients (a verl worker keeps its loop)."""

    async def wrapped() -> T:
        try:
            return await coro
        finally:
            await close_pooled_clients()

    return asyncio.run(wrapped())


async def run_call(
    tool: Any, args: dict[str, Any], trajectory: str
) -> tuple[Any, float, dict[str, Any]]:
    """What verl's ToolAgentLoop._call_tool does with a BaseTool: create, execute, release."""
    instance_id, _ = await tool.create(create_kwargs={})
    try:
        result: tuple[Any, float, dict[str, Any]] = await tool.execute(
            instance_id, args, agent_data=SimpleNamespace(request_id=trajectory)
        )
        return result
    finally:
        await tool.release(instance_id)


def test_generated_config_is_verl_loadable_and_documents_flattening(
    server: RunningServer, tmp_path: Path, tools: dict[str, Any]
) -> None:
    assert set(tools) == set(get_catalog().names)
    path = tmp_path / "tc.yaml"
    write_tool_config(server.url, path)
    text = path.read_text()
    assert "# verl keeps only type/description/enum" in text
    assert "get_exchange_rate.amount: dropped default, maximum, minimum" in text
    document = yaml.safe_load(text)
    assert all(e["class_name"] == "training.verl_bridge.tool.McpTool" for e in document["tools"])
    schema = tools["get_current_weather"].get_openai_tool_schema()
    assert schema.function.parameters.properties["unit"].enum == ["celsius", "fahrenheit"]


def test_every_tool_through_verl_objects_matches_ground_truth(tools: dict[str, Any]) -> None:
    async def scenario() -> None:
        context = ToolContext.reference("truth")
        for name, args in EXAMPLE_CALLS.items():
            response, reward, metrics = await run_call(tools[name], args, "trajectory-A")
            truth = get_catalog().execute(name, args, context, "mock")
            assert json.loads(response.text) == truth, name
            assert reward == 0.0 and metrics["tool_error"] is False

    run(scenario())


def test_notes_are_scoped_to_the_trajectory(tools: dict[str, Any]) -> None:
    async def scenario() -> None:
        await run_call(tools["save_note"], {"title": "k", "content": "v1"}, "traj-1")
        same, _, _ = await run_call(tools["read_note"], {"title": "k"}, "traj-1")
        other, _, metrics = await run_call(tools["read_note"], {"title": "k"}, "traj-2")
        assert json.loads(same.text)["content"] == "v1"
        assert "no note titled 'k'" in other.text and metrics["tool_error"] is True

    run(scenario())


def test_failing_call_becomes_text_the_model_sees(tools: dict[str, Any]) -> None:
    async def scenario() -> None:
        response, _, metrics = await run_call(
            tools["get_exchange_rate"], {"from_currency": "USD", "amount": "ten"}, "t"
        )
        assert "missing required argument 'to_currency'" in response.text
        assert "'amount' must be a number" in response.text
        assert metrics["tool_error"] is True and metrics["transport_error"] is False

    run(scenario())


def test_unreachable_server_is_text_not_an_exception(tools: dict[str, Any]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    tool_cls = type(tools["calculate_math"])
    schema = tools["calculate_math"].get_openai_tool_schema()
    dead = tool_cls(
        {"type": "native", "url": f"http://127.0.0.1:{dead_port}/mcp", "timeout_s": 2}, schema
    )

    async def scenario() -> None:
        response, _, metrics = await run_call(dead, {"expression": "1+1"}, "t")
        assert response.text.startswith("Error: the tool service could not run calculate_math")
        assert metrics["transport_error"] is True

    run(scenario())


def test_mock_faults_reach_the_model_as_text(tmp_path: Path) -> None:
    config = ServerConfig(
        port=0, workers=1, faults=FaultConfig(seed=5, failure_rate=1.0), log_level="warning"
    )
    with start(config) as running:
        path = tmp_path / "tc.yaml"
        write_tool_config(running.url, path)
        loaded = {t.name: t for t in verl_registry.initialize_tools_from_config(str(path))}

        async def scenario() -> list[str]:
            texts = []
            for _ in range(6):
                response, _, metrics = await run_call(
                    loaded["get_current_weather"], {"location": "Paris"}, "faulty"
                )
                assert metrics["tool_error"] is True and metrics["transport_error"] is False
                texts.append(response.text)
            return texts

        texts = run(scenario())
    assert all(text.startswith("Error") for text in texts)
    assert len(set(texts)) > 1  # successive calls of a trajectory draw different faults


def test_unknown_tool_on_the_server_is_a_model_facing_error(tools: dict[str, Any]) -> None:
    tool_cls = type(tools["calculate_math"])
    schema = tools["calculate_math"].get_openai_tool_schema()
    renamed = tool_cls(
        {"type": "native", "url": tools["calculate_math"].url, "mcp_name": "retired_tool"}, schema
    )

    async def scenario() -> None:
        response, _, metrics = await run_call(renamed, {"expression": "1"}, "t")
        assert response.text.startswith("Error: Unknown tool 'retired_tool'; available tools:")
        assert metrics["tool_error"] is True and metrics["transport_error"] is False

    run(scenario())
