"""Bad input and bad days: malformed JSON-RPC, oversized bodies, hung tools, clients that
vanish mid-call, 1,000 concurrent calls, graceful shutdown, fault replay, real vs mock."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest

from serving.mcp_client.http import McpHttpClient
from serving.mcp_server.config import FaultConfig, ServerConfig
from serving.mcp_server.server import CLEAN_EXIT, RunningServer, start
from serving.tools import Tool, ToolCatalog, get_catalog
from serving.tools.base import REFERENCE_NOW

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2025-06-18",
}


def _sleep(args: dict[str, Any], _: Any) -> dict[str, Any]:
    time.sleep(args["seconds"])
    return {"slept": args["seconds"]}


def slow_catalog() -> ToolCatalog:
    """The shared catalog plus a tool that sleeps (or hangs): for tests only, never shipped."""
    slow = Tool(
        "slow_tool",
        "Sleep for a while, then answer.",
        {
            "type": "object",
            "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 600}},
            "required": ["seconds"],
            "additionalProperties": False,
        },
        _sleep,
    )
    return ToolCatalog([*get_catalog(), slow])


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = ServerConfig(port=0, workers=2, call_timeout_s=1.0, log_level="warning")
    with start(config, catalog=slow_catalog()) as running:
        yield running


def rpc(method: str, params: dict[str, Any] | None = None, id_: int = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        message["params"] = params
    return message


def call(server: RunningServer, name: str, arguments: Any, **headers: str) -> dict[str, Any]:
    body = rpc("tools/call", {"name": name, "arguments": arguments})
    response = httpx.post(server.url, json=body, headers={**HEADERS, **headers}, timeout=20)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def test_hung_tool_is_bounded_by_the_call_timeout(server: RunningServer) -> None:
    result = call(server, "slow_tool", {"seconds": 30})  # the client gives up at 20 s
    assert result["isError"] is True
    assert "did not answer within 1 s" in result["content"][0]["text"]  # the server's bound
    # the worker is still healthy and serving
    assert call(server, "calculate_math", {"expression": "1+1"})["isError"] is False


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing required argument 'expression'"),
        ({"expression": "1", "extra": 2}, "unexpected argument 'extra'"),
        ({"expression": 7}, "must be a string"),
        ({"expression": "9" * 600}, "too long"),
        ({"expression": "1/0"}, "cannot evaluate"),
    ],
)
def test_bad_arguments_are_tool_errors_a_model_can_read(
    server: RunningServer, arguments: Any, message: str
) -> None:
    result = call(server, "calculate_math", arguments)
    assert result["isError"] is True
    assert message in result["content"][0]["text"]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b'{"jsonrpc": "2.0", "id": 1}',
        b'{"jsonrpc": "1.0", "id": 1, "method": "tools/list"}',
        b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]',
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "x"}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "no/such/method"}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "calculate_math", '
        b'"arguments": ["1+1"]}}',
        b'"just a string"',
        b"",
    ],
)
def test_malformed_json_rpc_gets_a_json_rpc_error_not_a_crash(
    server: RunningServer, body: bytes
) -> None:
    response = httpx.post(server.url, content=body, headers=HEADERS, timeout=10)
    assert response.status_code < 500
    assert "Traceback" not in response.text
    payload = response.json()
    assert "error" in payload, payload
    assert isinstance(payload["error"]["code"], int)
    assert call(server, "calculate_math", {"expression": "2+2"})["isError"] is False


def test_oversized_body_is_refused_with_413(server: RunningServer) -> None:
    huge = rpc("tools/call", {"name": "calculate_math", "arguments": {"expression": "1" * 400_000}})
    response = httpx.post(server.url, json=huge, headers=HEADERS, timeout=10)
    assert response.status_code == 413


def test_client_disconnecting_mid_call_does_not_hurt_the_server(server: RunningServer) -> None:
    body = json.dumps(rpc("tools/call", {"name": "slow_tool", "arguments": {"seconds": 0.5}}))
    request = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
        f"{body}"
    ).encode()
    for _ in range(6):  # enough to reach both workers
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(request)
            time.sleep(0.05)  # the call is now in flight; vanish
    half = body.encode()[: len(body) // 2]
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(request[: len(request) - len(body)] + half)  # body never completes
    time.sleep(0.8)
    assert server.alive()
    for _ in range(4):
        assert call(server, "calculate_math", {"expression": "3*3"})["isError"] is False


def test_a_thousand_concurrent_calls_each_get_exactly_one_answer(server: RunningServer) -> None:
    before = httpx.get(server.base_url + "/metrics?format=json").json()
    calls_before = before["tools"]["calculate_math"]["calls"]

    async def scenario() -> list[tuple[int, dict[str, Any]]]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:

            async def one(i: int) -> tuple[int, dict[str, Any]]:
                body = rpc(
                    "tools/call",
                    {"name": "calculate_math", "arguments": {"expression": f"{i}+0"}},
                    id_=i,
                )
                async with http.post(server.url, json=body, headers=HEADERS) as response:
                    assert response.status == 200
                    return i, await response.json()

            return await asyncio.gather(*(one(i) for i in range(1000)))

    answers = asyncio.run(scenario())
    assert len(answers) == 1000
    for i, payload in answers:
        assert payload["id"] == i
        assert payload["result"]["structuredContent"]["result"] == str(i)
    after = httpx.get(server.base_url + "/metrics?format=json").json()
    assert after["tools"]["calculate_math"]["calls"] - calls_before == 1000


def test_health_and_metrics_endpoints(server: RunningServer) -> None:
    health = httpx.get(server.base_url + "/healthz")
    assert health.status_code == 200
    assert health.json()["status"] == "ok" and health.json()["mode"] == "mock"
    call(server, "read_note", {"title": "missing"})
    text = httpx.get(server.base_url + "/metrics").text
    assert "# TYPE toolrl_mcp_tool_calls_total counter" in text
    assert 'toolrl_mcp_tool_errors_total{tool="read_note"}' in text
    assert 'toolrl_mcp_errors_by_kind_total{kind="execution_error"}' in text
    assert httpx.get(server.base_url + "/nope").status_code == 404


def test_graceful_shutdown_lets_in_flight_calls_finish() -> None:
    config = ServerConfig(port=0, workers=1, call_timeout_s=10, log_level="warning")
    running = start(config, catalog=slow_catalog())
    outcome: dict[str, Any] = {}

    def slow_call() -> None:
        body = rpc("tools/call", {"name": "slow_tool", "arguments": {"seconds": 1.5}})
        outcome["response"] = httpx.post(running.url, json=body, headers=HEADERS, timeout=20)

    try:
        thread = threading.Thread(target=slow_call)
        thread.start()
        time.sleep(0.5)
        codes = running.stop()
        thread.join(10)
    finally:
        running.stop()
    assert codes[0] in CLEAN_EXIT
    response = outcome["response"]
    assert response.status_code == 200
    assert response.json()["result"]["structuredContent"] == {"slept": 1.5}


def _outcomes(url: str, session: str, n: int) -> list[tuple[bool, str]]:
    async def scenario() -> list[tuple[bool, str]]:
        client = McpHttpClient(url)
        try:
            results = []
            for seq in range(n):
                r = await client.call_tool(
                    "get_current_weather", {"location": "Paris"}, session=session, seq=seq
                )
                results.append((r.is_error, r.text))
            return results
        finally:
            await client.close()

    return asyncio.run(scenario())


def test_mock_faults_replay_for_the_same_seed_and_differ_for_another() -> None:
    faults = FaultConfig(seed=11, failure_rate=0.5, empty_rate=0.2)
    configs = [
        ServerConfig(port=0, workers=2, faults=faults, log_level="warning"),
        ServerConfig(port=0, workers=1, faults=faults, log_level="warning"),
        ServerConfig(
            port=0, workers=1, faults=faults.model_copy(update={"seed": 12}), log_level="warning"
        ),
    ]
    runs = []
    for config in configs:
        with start(config) as running:
            runs.append(_outcomes(running.url, "trajectory-1", 40))
    assert runs[0] == runs[1]  # same seed: same sequence, whatever the worker count
    assert runs[0] != runs[2]
    errors = [text for is_error, text in runs[0] if is_error]
    assert 8 <= len(errors) <= 32
    assert any("Retry" in text or "retry" in text for text in errors)
    assert any('"results": []' in text for is_error, text in runs[0] if not is_error)


def test_real_mode_uses_the_real_clock_and_never_injects_faults() -> None:
    faults = FaultConfig(failure_rate=1.0)
    with start(
        ServerConfig(mode="real", port=0, workers=1, faults=faults, log_level="warning")
    ) as running:
        before = dt.datetime.now(dt.UTC).date().isoformat()
        result = call(running, "get_current_time", {"timezone": "UTC"})
        after = dt.datetime.now(dt.UTC).date().isoformat()
        assert result["isError"] is False
        assert result["structuredContent"]["date"] in {before, after}  # even across midnight
    with start(ServerConfig(mode="mock", port=0, workers=1, log_level="warning")) as running:
        result = call(running, "get_current_time", {"timezone": "UTC"})
        assert result["structuredContent"]["date"] == REFERENCE_NOW.date().isoformat()
