"""Record/replay against real servers on loopback: calls recorded from the real `mcp-server-time`
over stdio (and from our own mock server over HTTP) through `RecordingClient`, then served by
the project's MCP server in replay mode and called with the project's `McpHttpClient`.

What must hold: recorded calls give the recorded results whatever the key order or number
spelling; unrecorded calls are tool errors, never transport errors; argument errors read as in
mock mode; the seeded faults are mock mode's, call for call; a missing or corrupt recording
stops start-up with an error naming the file; hostile arguments are tool errors."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from serving.mcp_client.call_store import CallStore
from serving.mcp_client.http import McpHttpClient
from serving.mcp_client.recording import (
    RecordingClient,
    read_recorded_tools,
    tools_path_for,
    write_recorded_tools,
)
from serving.mcp_client.stdio import StdioMcpClient
from serving.mcp_server.config import FaultConfig, ServerConfig
from serving.mcp_server.examples import EXAMPLE_CALLS
from serving.mcp_server.replay import ReplayError, load_replay
from serving.mcp_server.server import RunningServer, start
from serving.tools import get_catalog

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2025-06-18",
}
PARIS = {"timezone": "Europe/Paris"}
CONVERT = {"source_timezone": "Europe/Paris", "time": "12:30", "target_timezone": "Asia/Tokyo"}
MARS = {"timezone": "Mars/Olympus"}
STATELESS = [(n, a) for n, a in EXAMPLE_CALLS.items() if not get_catalog().get(n).stateful]
NUMERIC = {"value": 2, "from_unit": "kilometer", "to_unit": "mile"}


@dataclass
class Recording:
    store: Path
    results: dict[str, tuple[str, bool]]
    """What the real server answered, by label."""


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def time_recording(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    """The real mcp-server-time over stdio, recorded under the prefix `time_`."""
    store_path = tmp_path_factory.mktemp("time") / "calls.sqlite"

    async def record() -> dict[str, tuple[str, bool]]:
        inner = StdioMcpClient("time", sys.executable, ["-m", "mcp_server_time"])
        with CallStore(store_path) as store:
            client = RecordingClient(inner, store, "time", prefix="time_")
            try:
                await client.list_tools()
                answers = {}
                for label, name, args in (
                    ("paris", "get_current_time", PARIS),
                    ("convert", "convert_time", CONVERT),
                    ("mars", "get_current_time", MARS),
                ):
                    result = await client.call_tool(name, args)
                    answers[label] = (result.text, result.is_error)
                await client.write_schemas()
            finally:
                await client.close()
            assert client.recorded == 3 and len(store) == 3
        return answers

    return Recording(store_path, run(record()))


@pytest.fixture(scope="module")
def mock_recording(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    """Our own mock server over HTTP, recorded without a prefix: the nine stateless tools'
    examples, plus a number given as an integer."""
    store_path = tmp_path_factory.mktemp("mock") / "calls.sqlite"

    async def record(url: str) -> dict[str, tuple[str, bool]]:
        with CallStore(store_path) as store:
            client = RecordingClient(McpHttpClient(url), store, "toolrl", batch_size=4)
            try:
                answers = {}
                for name, args in [*STATELESS, ("unit_converter", NUMERIC)]:
                    result = await client.call_tool(name, args)
                    answers[name if args is not NUMERIC else "numeric"] = (
                        result.text,
                        result.is_error,
                    )
                await client.write_schemas()
            finally:
                await client.close()
        return answers

    with start(ServerConfig(port=0, workers=1, log_level="warning")) as mock:
        return Recording(store_path, run(record(mock.url)))


def replay_config(store: Path, **extra: Any) -> ServerConfig:
    return ServerConfig(mode="replay", store=store, port=0, log_level="warning", **extra)


@pytest.fixture(scope="module")
def time_replay(time_recording: Recording) -> Iterator[RunningServer]:
    with start(replay_config(time_recording.store, workers=2)) as running:
        yield running


def call_all(url: str, calls: list[tuple[str, Any]], session: str | None = None) -> list[Any]:
    async def scenario() -> list[Any]:
        client = McpHttpClient(url)
        try:
            out = []
            for seq, (name, args) in enumerate(calls):
                result = await client.call_tool(name, args, session=session, seq=seq)
                out.append((result.is_error, result.text))
            return out
        finally:
            await client.close()

    result: list[Any] = run(scenario())
    return result


# --- the real third-party server, recorded and replayed ------------------------------------
def test_replay_lists_exactly_the_recorded_tools_under_their_prefix(
    time_recording: Recording, time_replay: RunningServer
) -> None:
    recorded = read_recorded_tools(tools_path_for(time_recording.store))["time"]
    assert recorded.prefix == "time_"

    async def listed() -> list[dict[str, Any]]:
        client = McpHttpClient(time_replay.url)
        try:
            return await client.list_tools()
        finally:
            await client.close()

    tools = {tool["name"]: tool for tool in run(listed())}
    assert set(tools) == {"time_" + tool["name"] for tool in recorded.tools}
    by_name = {tool["name"]: tool for tool in recorded.tools}
    for name, tool in tools.items():
        assert tool["inputSchema"] == by_name[name.removeprefix("time_")]["inputSchema"]
        assert tool["description"] == by_name[name.removeprefix("time_")]["description"]


def test_recorded_calls_get_the_recorded_results_in_any_key_order(
    time_recording: Recording, time_replay: RunningServer
) -> None:
    shuffled = dict(reversed(list(CONVERT.items())))
    got = call_all(
        time_replay.url,
        [
            ("time_get_current_time", PARIS),
            ("time_convert_time", shuffled),
            ("time_get_current_time", MARS),
        ],
    )
    paris, convert, mars = (time_recording.results[k] for k in ("paris", "convert", "mars"))
    assert got[0] == (False, paris[0])
    assert got[1] == (False, convert[0])
    assert mars[1] is True and got[2] == (True, mars[0])  # a recorded tool error stays one
    health = httpx.get(time_replay.base_url + "/healthz", timeout=5).json()
    with CallStore(time_recording.store) as store:
        assert health["store_digest"] == store.digest() and health["recorded"] == 3


def test_an_unrecorded_call_is_a_tool_error_that_says_what_the_tool_takes(
    time_replay: RunningServer,
) -> None:
    [(is_error, text)] = call_all(
        time_replay.url, [("time_get_current_time", {"timezone": "Asia/Tokyo"})]
    )
    assert is_error
    assert "get_current_time on time found no result" in text and "'Asia/Tokyo'" in text
    assert "timezone (string, required)" in text
    [(is_error, text)] = call_all(
        time_replay.url, [("time_convert_time", {**CONVERT, "time": "12:31"})]
    )
    assert is_error and "source_timezone (string, required)" in text
    metrics = httpx.get(time_replay.base_url + "/metrics?format=json", timeout=5).json()
    assert "not_recorded" in json.dumps(metrics)


def test_invalid_arguments_read_as_in_mock_mode(time_replay: RunningServer) -> None:
    got = call_all(
        time_replay.url,
        [
            ("time_get_current_time", {}),
            ("time_get_current_time", {"timezone": 5}),
            ("time_get_current_time", {"timezone": "UTC", "zone": "x"}),
        ],
    )
    assert all(is_error for is_error, _ in got)
    assert (
        got[0][1]
        == "Invalid arguments for time_get_current_time: missing required argument 'timezone'"
    )
    assert "argument 'timezone' must be a string, got integer 5" in got[1][1]
    assert "unexpected argument 'zone' (allowed: timezone)" in got[2][1]


def test_an_unknown_tool_is_the_same_protocol_error_as_in_mock_mode(
    time_replay: RunningServer,
) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "get_current_time", "arguments": PARIS},
    }
    reply = httpx.post(time_replay.url, json=body, headers=HEADERS, timeout=10).json()
    assert reply["error"]["code"] == -32602
    assert "time_get_current_time" in reply["error"]["message"]


# --- replay of a mock recording: indistinguishable from mock mode, faults included --------
def test_numbers_find_their_record_as_integer_or_float(mock_recording: Recording) -> None:
    with start(replay_config(mock_recording.store, workers=1)) as replay:
        as_float = {"to_unit": "mile", "value": 2.0, "from_unit": "kilometer"}
        got = call_all(replay.url, [("unit_converter", as_float), ("unit_converter", NUMERIC)])
    expected = (False, mock_recording.results["numeric"][0])
    assert got == [expected, expected]


def test_seeded_faults_are_mock_modes_call_for_call(mock_recording: Recording) -> None:
    faults = FaultConfig(seed=7, failure_rate=0.35, empty_rate=0.2)
    calls: list[tuple[str, Any]] = [STATELESS[i % len(STATELESS)] for i in range(45)]
    calls += [("calculate_math", {}), ("unit_converter", {"value": "two"})]  # invalid arguments
    mock_config = ServerConfig(port=0, workers=2, faults=faults, log_level="warning")
    with start(mock_config) as mock:
        in_mock = call_all(mock.url, calls, session="trajectory-1")
    with start(replay_config(mock_recording.store, workers=2, faults=faults)) as replay:
        in_replay = call_all(replay.url, calls, session="trajectory-1")
        again = call_all(replay.url, calls, session="trajectory-1")
        other = call_all(replay.url, calls, session="trajectory-2")
    assert in_replay == in_mock  # same seed, same calls: the same outcomes, text for text
    assert again == in_replay and other != in_replay
    injected = [text for is_error, text in in_replay[:45] if is_error]
    assert 5 <= len(injected) <= 30
    assert any('"results": []' in text for is_error, text in in_replay if not is_error)
    assert all("found no result" not in text for _, text in in_replay)


# --- start-up errors -------------------------------------------------------------------
def test_replay_without_a_store_or_with_a_missing_one_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=re.escape("needs `store`")):
        ServerConfig(mode="replay")
    missing = tmp_path / "nope.sqlite"
    with pytest.raises(ValidationError, match=re.escape(f"replay store {missing} does not exist")):
        ServerConfig(mode="replay", store=missing)
    with pytest.raises(ValidationError, match=re.escape("only read in replay and live mode")):
        ServerConfig(mode="mock", store=missing)


def test_a_store_that_is_not_a_call_store_stops_start_up_naming_it(
    tmp_path: Path, time_recording: Recording
) -> None:
    text = tmp_path / "text.sqlite"
    text.write_text("not a database, just text\n" * 100)
    with pytest.raises(ReplayError, match=re.escape(f"{text} is not a CallStore")):
        start(replay_config(text))
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE calls (a TEXT)")
    with pytest.raises(ReplayError, match=re.escape(f"{other} is not a CallStore")):
        start(replay_config(other))
    lonely = tmp_path / "lonely.sqlite"
    CallStore(lonely).close()  # a real store, but nobody wrote its tools/list
    with pytest.raises(ReplayError, match=str(tmp_path / "lonely.tools.json")):
        load_replay(lonely)
    broken = tmp_path / "broken.tools.json"
    broken.write_text("{")
    with pytest.raises(ReplayError, match=re.escape(f"{broken} is not a readable JSON file")):
        start(replay_config(time_recording.store, store_tools=broken))


def test_the_cli_refuses_a_bad_store_with_a_readable_message(tmp_path: Path) -> None:
    import typer

    from serving.mcp_server.cli import register_cli

    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """test root"""

    register_cli(app)
    runner = CliRunner()
    help_text = runner.invoke(app, ["mcp", "serve", "--help"]).output
    assert "--store" in help_text and "replay" in help_text
    missing = runner.invoke(app, ["mcp", "serve", "--mode", "replay"])
    assert missing.exit_code == 2 and "needs `store`" in missing.output
    bad = tmp_path / "bad.sqlite"
    bad.write_text("garbage")
    result = runner.invoke(
        app, ["mcp", "serve", "--mode", "replay", "--store", str(bad), "--port", "0"]
    )
    assert result.exit_code == 2
    assert "is not a CallStore" in result.output and "Traceback" not in result.output


# --- hostile arguments ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def open_replay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A recording of a tool with free-form arguments (object, type list, anyOf), written
    through the public writers, to reach the paths that typed strings never do."""
    root = tmp_path_factory.mktemp("open")
    store_path = root / "calls.sqlite"
    schema = {
        "type": "object",
        "properties": {
            "payload": {"type": "object"},
            "tags": {"type": ["array", "null"]},
            "anything": {"anyOf": [{"type": "string"}, {"type": "number"}]},
        },
        "required": ["payload"],
    }
    with CallStore(store_path) as store:
        store.record_one("kv", "put", {"payload": {"a": [1, 2]}}, '{"ok": true}', False)
    write_recorded_tools(
        tools_path_for(store_path),
        "kv",
        [{"name": "put", "description": "Store a value.", "inputSchema": schema}],
        prefix="kv_",
    )
    with start(replay_config(store_path, workers=1)) as running:
        yield running


def raw_call(server: RunningServer, body: bytes) -> httpx.Response:
    return httpx.post(server.url, content=body, headers=HEADERS, timeout=20)


def test_hostile_arguments_are_tool_errors_never_a_crash(
    open_replay: RunningServer, time_replay: RunningServer
) -> None:
    ok = call_all(open_replay.url, [("kv_put", {"payload": {"a": [1.0, 2]}})])
    assert ok == [(False, '{"ok": true}')]
    deep: Any = 1
    for _ in range(60):
        deep = {"k": deep}
    huge = "x" * 200_000
    cases: list[tuple[RunningServer, str, Any, str]] = [
        (open_replay, "kv_put", {"payload": deep}, "nested too deeply"),
        (open_replay, "kv_put", {"payload": {}, "tags": "a"}, "must be array or null"),
        (open_replay, "kv_put", {"payload": {"blob": huge}}, "found no result"),
        (time_replay, "time_get_current_time", {"timezone": huge}, "too long"),
        (open_replay, "kv_put", {"payload": {}, "anything": [1]}, "found no result"),
    ]
    for server, name, args, message in cases:
        [(is_error, text)] = call_all(server.url, [(name, args)])
        assert is_error and message in text, (name, text[:200])
    nan = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "kv_put",'
        b' "arguments": {"payload": {"x": NaN}, "anything": Infinity}}}'
    )
    reply = raw_call(open_replay, nan)
    assert reply.status_code < 500 and "Traceback" not in reply.text
    result = reply.json()["result"]
    assert result["isError"] is True
    assert "arguments hold a non-finite number" in result["content"][0]["text"]
    nested = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "kv_put", '
        b'"arguments": {"payload": ' + b'{"k": ' * 5000 + b"1" + b"}" * 5001 + b"}}"
    )
    reply = raw_call(open_replay, nested)  # past the SDK parser's limit: its parse error,
    assert reply.status_code == 400 and reply.json()["error"]["code"] == -32700  # as in mock
    assert call_all(open_replay.url, [("kv_put", {"payload": {"a": [1, 2]}})]) == ok
    assert open_replay.alive()


# --- the recording client itself ----------------------------------------------------------
def test_recording_skips_what_has_no_canonical_form_and_merges_sidecars(
    tmp_path: Path, time_recording: Recording
) -> None:
    """A NaN argument is forwarded (the server answers) but not recorded; a second server's
    tools/list joins the sidecar instead of replacing the first's."""
    store_path = tmp_path / "calls.sqlite"

    async def scenario() -> None:
        with CallStore(store_path) as store:
            inner = StdioMcpClient("time", sys.executable, ["-m", "mcp_server_time"])
            client = RecordingClient(inner, store, "time", prefix="time_", batch_size=10)
            try:
                result = await client.call_tool("get_current_time", {"timezone": float("nan")})
                assert result.is_error  # the real server's own answer
                await client.call_tool("get_current_time", PARIS)
                assert len(store) == 0  # buffered until the batch fills or close()
                await client.write_schemas()
            finally:
                await client.close()
            assert (client.recorded, client.skipped, len(store)) == (1, 1, 1)

    run(scenario())
    write_recorded_tools(tools_path_for(store_path), "kv", [], prefix="kv_")
    servers = read_recorded_tools(tools_path_for(store_path))
    assert set(servers) == {"kv", "time"} and servers["time"].prefix == "time_"
    assert (
        servers["time"].tools
        == read_recorded_tools(tools_path_for(time_recording.store))["time"].tools
    )


def test_the_cpu_backend_serves_the_specs_recording(time_recording: Recording) -> None:
    """`tools.mode: replay` in a spec makes the run's embedded tool server a replay server."""
    from training.cpu_backend.run import tool_server
    from training.spec.model import TrainingSpec

    spec = TrainingSpec.model_validate(
        {
            "name": "t",
            "model": {"path": "tiny://hermes"},
            "data": {"train_files": ["/d/a.parquet"], "test_files": ["/d/b.parquet"]},
            "batch": {"ppo_mini_batch_size": 4},
            "tools": {"mode": "replay", "store": str(time_recording.store)},
        }
    )
    with tool_server(spec) as url:
        health = httpx.get(url.removesuffix("/mcp") + "/healthz", timeout=5).json()
        [(is_error, text)] = call_all(url, [("time_get_current_time", PARIS)])
    assert health["mode"] == "replay" and health["store"] == str(time_recording.store)
    assert (is_error, text) == (False, time_recording.results["paris"][0])


# --- live mode: pass-through with recording, then replay of what it recorded --------------
def test_live_mode_records_what_replay_then_serves(tmp_path: Path) -> None:
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        json.dumps(
            {
                "servers": {
                    "time": {
                        "command": sys.executable,
                        "args": ["-m", "mcp_server_time"],
                        "prefix": "time_",
                    }
                }
            }
        )
    )
    store = tmp_path / "live.sqlite"
    calls: list[tuple[str, Any]] = [
        ("time_convert_time", CONVERT),
        ("time_get_current_time", MARS),
        ("time_get_current_time", {}),  # refused by validation: never reaches the source
    ]
    config = ServerConfig(
        mode="live", sources=sources, store=store, port=0, workers=2, log_level="warning"
    )
    with start(config) as live:
        health = httpx.get(live.base_url + "/healthz", timeout=5).json()
        in_live = call_all(live.url, calls)
    assert health["mode"] == "live" and health["tools"] == 2
    assert in_live[0][0] is False and "Asia/Tokyo" in in_live[0][1]
    assert in_live[1][0] is True and "Mars/Olympus" in in_live[1][1]
    assert "missing required argument 'timezone'" in in_live[2][1]
    with CallStore(store) as recorded:
        assert len(recorded) == 2  # the two calls that reached the server, flushed at stop
    with start(replay_config(store, workers=1)) as replay:
        assert call_all(replay.url, calls) == in_live


def test_live_mode_with_a_source_that_is_down_fails_start_up_naming_it(tmp_path: Path) -> None:
    from serving.mcp_client.catalog import CatalogError

    sources = tmp_path / "sources.yaml"
    sources.write_text(json.dumps({"servers": {"gone": {"url": "http://127.0.0.1:9/mcp"}}}))
    with pytest.raises(CatalogError, match="gone"):
        start(ServerConfig(mode="live", sources=sources, port=0, workers=1))
    with pytest.raises(ValidationError, match="needs `sources`"):
        ServerConfig(mode="live")


def test_the_pipeline_refuses_a_tool_server_other_than_the_plans(
    time_recording: Recording, time_replay: RunningServer
) -> None:
    """check_tools: rollouts must call the tools the lineage will name."""
    from training.pipeline.retraining_stage import StageError, check_mcp

    with CallStore(time_recording.store) as store:
        digest = store.digest()
    assert check_mcp(time_replay.url, "replay", digest)
    assert check_mcp(time_replay.url)  # no tools named: health only
    with pytest.raises(StageError, match="serves mode 'replay', but the spec trains against"):
        check_mcp(time_replay.url, "mock", None)
    with pytest.raises(StageError, match="replays a recording with digest"):
        check_mcp(time_replay.url, "replay", "0" * 64)
