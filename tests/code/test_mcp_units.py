"""Pure pieces of the MCP server and bridge: fault model, metrics, config, flattening."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from pydantic import ValidationError

from serving.mcp_server.calls import CallRunner
from serving.mcp_server.config import FaultConfig, ServerConfig
from serving.mcp_server.faults import FAULT_KINDS, FaultInjector
from serving.mcp_server.metrics import Metrics
from serving.tools import get_catalog
from serving.tools.base import ToolContext
from training.verl_bridge.tool_config import FlattenReport, build_tool_config, flatten_property

pytestmark = pytest.mark.timeout(60)


def test_same_seed_same_sequence_and_other_seed_differs() -> None:
    cfg = FaultConfig(seed=7, failure_rate=0.4, empty_rate=0.1, latency_ms=5)
    a = [
        FaultInjector(cfg).decide("get_current_weather", {"location": "Paris"}, "s", i)
        for i in range(300)
    ]
    b = [
        FaultInjector(cfg).decide("get_current_weather", {"location": "Paris"}, "s", i)
        for i in range(300)
    ]
    c = [
        FaultInjector(cfg.model_copy(update={"seed": 8})).decide(
            "get_current_weather", {"location": "Paris"}, "s", i
        )
        for i in range(300)
    ]
    assert a == b
    assert [f.kind for f in a] != [f.kind for f in c]


def test_fault_rates_and_kinds_follow_config() -> None:
    injector = FaultInjector(FaultConfig(seed=1, failure_rate=0.3, empty_rate=0.5))
    kinds = Counter(
        injector.decide("get_exchange_rate", {"from_currency": "USD"}, f"s{i % 50}", i).kind
        for i in range(4000)
    )
    errors = sum(kinds[k] for k in FAULT_KINDS)
    assert 0.26 < errors / 4000 < 0.34
    assert set(FAULT_KINDS) <= set(kinds)
    # empties are drawn among the calls that did not fail: 0.7 * 0.5
    assert 0.31 < kinds["empty"] / 4000 < 0.39


def test_fault_messages_look_like_real_failures() -> None:
    injector = FaultInjector(FaultConfig(seed=3, failure_rate=1.0))
    messages = {
        f.kind: f.message
        for f in (
            injector.decide("get_current_weather", {"location": "Oslo"}, "s", i) for i in range(200)
        )
    }
    assert "timed out" in messages["timeout"]
    assert "429" in messages["rate_limit"] and "Retry after" in messages["rate_limit"]
    assert any(code in messages["upstream_5xx"] for code in ("500", "502", "503", "504"))
    assert "'location'" in messages["invalid_argument"]
    assert all("Traceback" not in m for m in messages.values())


def test_latency_is_seeded_and_capped() -> None:
    cfg = FaultConfig(seed=0, latency_ms=50, latency_max_ms=120)
    delays = [FaultInjector(cfg).decide("calculate_math", {}, "s", i).delay_s for i in range(500)]
    assert max(delays) <= 0.120 + 1e-9
    assert 0.03 < sum(delays) / len(delays) < 0.06


def test_config_rejects_unknown_keys_and_bad_values() -> None:
    with pytest.raises(ValidationError):
        ServerConfig.model_validate({"mode": "mock", "wokers": 2})
    with pytest.raises(ValidationError):
        ServerConfig(mode="fake")
    with pytest.raises(ValidationError):
        FaultConfig(failure_rate=1.5)
    with pytest.raises(ValidationError):
        ServerConfig(path="mcp")


def test_token_comes_from_env_when_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLRL_MCP_TOKEN", "from-env")
    assert ServerConfig().resolved_token() == "from-env"
    assert ServerConfig(token="explicit").resolved_token() == "explicit"
    monkeypatch.delenv("TOOLRL_MCP_TOKEN")
    assert ServerConfig().resolved_token() is None


def test_metrics_sum_rows_of_all_workers_and_render_prometheus() -> None:
    metrics = Metrics(["a", "b"], workers=2)
    metrics.record("a", 0.003, None)
    metrics.bind_worker(1)
    metrics.record("a", 0.020, "timeout")
    metrics.record("zzz", 0.001, "unknown_tool")
    snap = metrics.snapshot()
    assert snap["tools"]["a"]["calls"] == 2
    assert snap["tools"]["a"]["errors"] == 1
    assert snap["tools"]["_unknown"]["calls"] == 1
    assert snap["errors_by_kind"]["timeout"] == 1
    text = metrics.render_prometheus()
    assert 'toolrl_mcp_tool_calls_total{tool="a"} 2' in text
    assert 'toolrl_mcp_tool_latency_ms_bucket{tool="a",le="+Inf"} 2' in text
    assert 'toolrl_mcp_tool_latency_ms_bucket{tool="a",le="5.0"} 1' in text


def test_mock_runner_results_equal_reference_ground_truth() -> None:
    catalog = get_catalog()
    runner = CallRunner(catalog, ServerConfig(mode="mock"), Metrics(catalog.names))
    args = {"timezone": "Asia/Shanghai"}
    outcome = asyncio.run(runner.call("get_current_time", args, "s1"))
    assert not outcome.is_error
    assert outcome.result == catalog.execute(
        "get_current_time", args, ToolContext.reference(), "mock"
    )
    runner.close()


def test_runner_reports_bad_calls_as_tool_errors() -> None:
    catalog = get_catalog()
    runner = CallRunner(catalog, ServerConfig(mode="mock"), Metrics(catalog.names))
    missing = asyncio.run(runner.call("unit_converter", {"value": 3}))
    extra = asyncio.run(runner.call("calculate_math", {"expression": "1", "x": 1}))
    wrong = asyncio.run(runner.call("search_knowledge", {"query": "x", "top_k": "3"}))
    not_object = asyncio.run(runner.call("calculate_math", ["1+1"]))
    for outcome in (missing, extra, wrong, not_object):
        assert outcome.is_error and outcome.kind == "invalid_arguments"
    assert "missing required argument 'from_unit'" in missing.text
    assert "unexpected argument 'x'" in extra.text
    assert "must be an integer" in wrong.text
    runner.close()


def test_flatten_keeps_only_what_verl_keeps_and_reports_the_rest() -> None:
    report = FlattenReport()
    flat = flatten_property(
        "t.p",
        {
            "anyOf": [{"type": "string"}, {"type": "null"}],
            "description": "d",
            "default": None,
            "maxLength": 3,
        },
        report,
    )
    assert flat == {"type": ["string", "null"], "description": "d"}
    assert any("anyOf flattened" in line for line in report.changes)
    assert any("dropped default, maxLength" in line for line in report.changes)
    nested = flatten_property(
        "t.q", {"anyOf": [{"type": "object", "properties": {}}, {"$ref": "#/x"}]}, report
    )
    assert nested["type"] == "string"
    listy = flatten_property("t.r", {"type": "array", "items": {"type": "integer"}}, report)
    assert listy == {"type": "array"}
    assert "t.r: dropped items" in report.changes


def test_tool_config_from_catalog_schemas() -> None:
    tools = [
        {"name": t.name, "description": t.description, "inputSchema": dict(t.parameters)}
        for t in get_catalog()
    ]
    document, report = build_tool_config(tools, "http://x/mcp")
    entries = {e["tool_schema"]["function"]["name"]: e for e in document["tools"]}
    assert set(entries) == set(get_catalog().names)
    weather = entries["get_current_weather"]
    assert weather["class_name"] == "training.verl_bridge.tool.McpTool"
    assert weather["config"]["type"] == "native" and weather["config"]["url"] == "http://x/mcp"
    props = weather["tool_schema"]["function"]["parameters"]["properties"]
    assert props["unit"] == {
        "type": "string",
        "description": "Temperature unit",
        "enum": ["celsius", "fahrenheit"],
    }
    assert weather["tool_schema"]["function"]["parameters"]["required"] == ["location"]
    assert "get_current_weather.unit: dropped default" in report.changes
