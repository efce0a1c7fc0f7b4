"""The tool catalog: schemas, validation messages, real implementations, what mock mode is."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from serving.tools import (
    ToolArgumentError,
    ToolContext,
    ToolExecutionError,
    UnknownToolError,
    get_catalog,
)
from serving.tools.base import REFERENCE_NOW

MINIMIND_TOOLS = {
    "calculate_math",
    "unit_converter",
    "get_current_weather",
    "get_current_time",
    "get_exchange_rate",
    "translate_text",
}
VALID_CALLS: dict[str, dict[str, Any]] = {
    "calculate_math": {"expression": "256*37"},
    "unit_converter": {"value": 100, "from_unit": "km", "to_unit": "mile"},
    "get_current_weather": {"location": "Paris"},
    "get_current_time": {"timezone": "Asia/Shanghai"},
    "get_exchange_rate": {"from_currency": "USD", "to_currency": "EUR", "amount": 100},
    "translate_text": {"text": "thank you", "target_language": "french"},
    "search_knowledge": {"query": "capital of Japan"},
    "date_calculator": {"operation": "add_days", "start_date": "2025-01-30", "days": 30},
    "lookup_price": {"product": "laptop", "currency": "JPY"},
    "save_note": {"title": "wifi", "content": "tiger42"},
    "read_note": {"title": "wifi"},
}


def test_catalog_has_minimind_tools_plus_multi_step_helpers() -> None:
    names = set(get_catalog().names)
    assert names >= MINIMIND_TOOLS
    assert len(names - MINIMIND_TOOLS) >= 4
    assert set(VALID_CALLS) == names


def test_openai_schemas_are_well_formed() -> None:
    for schema in get_catalog().openai_schemas():
        assert schema["type"] == "function"
        function = schema["function"]
        assert function["name"] and function["description"]
        params = function["parameters"]
        assert params["type"] == "object"
        assert params["additionalProperties"] is False
        assert set(params["required"]) <= set(params["properties"])


def test_every_tool_runs_for_real_in_the_reference_context() -> None:
    context = ToolContext.reference("s1")
    catalog = get_catalog()
    results = {name: catalog.execute(name, args, context) for name, args in VALID_CALLS.items()}
    assert results["calculate_math"]["result"] == "9472"
    assert results["unit_converter"]["result"] == pytest.approx(62.1371)
    assert results["get_current_weather"]["location"] == "Paris"
    assert results["get_current_time"]["time"] == "17:30"  # 09:30 UTC -> UTC+8
    assert results["get_exchange_rate"]["converted"] == pytest.approx(86.6)
    assert results["translate_text"]["translation"] == "merci"
    assert results["search_knowledge"]["results"][0]["facts"]["capital"] == "Tokyo"
    assert results["date_calculator"]["result"] == "2025-03-01"
    assert results["lookup_price"]["currency"] == "JPY"
    assert results["read_note"]["content"] == "tiger42"


def test_mock_mode_runs_a_tools_own_mock_and_otherwise_the_real_code() -> None:
    """The catalog defines no separate mocks: mock mode is the real implementation in the
    reference context (docs/parts/mcp.md). What mode selects is the implementation; what
    makes results deterministic is the context, checked below with a different clock."""
    from serving.tools.base import Tool

    def real(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        return {"from": "real", "at": context.now().isoformat()}

    def mock(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        return {"from": "mock"}

    schema = {"type": "object", "properties": {}}
    with_mock = Tool("t", "d", schema, real, mock=mock)
    without_mock = Tool("t", "d", schema, real)
    context = ToolContext.reference()
    assert with_mock.run({}, context, mode="mock") == {"from": "mock"}
    assert with_mock.run({}, context, mode="real")["from"] == "real"
    assert without_mock.run({}, context, mode="mock") == without_mock.run({}, context, "real")
    assert all(get_catalog().get(name).mock is None for name in VALID_CALLS)

    later = ToolContext(now=lambda: REFERENCE_NOW + dt.timedelta(hours=2))
    args = VALID_CALLS["get_current_time"]
    at_reference = get_catalog().execute("get_current_time", args, context, mode="mock")
    at_later = get_catalog().execute("get_current_time", args, later, mode="mock")
    assert at_reference["time"] == "17:30" and at_later["time"] == "19:30"


def test_unit_converter_uses_pint_dimensions() -> None:
    catalog, context = get_catalog(), ToolContext.reference()
    out = catalog.execute(
        "unit_converter", {"value": 100, "from_unit": "degC", "to_unit": "degF"}, context
    )
    assert out["result"] == pytest.approx(212.0)
    with pytest.raises(ToolExecutionError, match="different kinds of quantity"):
        catalog.execute(
            "unit_converter", {"value": 1, "from_unit": "kg", "to_unit": "meter"}, context
        )
    with pytest.raises(ToolExecutionError, match="unknown unit"):
        catalog.execute(
            "unit_converter", {"value": 1, "from_unit": "__class__", "to_unit": "m"}, context
        )


def test_clock_is_injected() -> None:
    fixed = dt.datetime(2030, 1, 1, 0, 0, tzinfo=dt.UTC)
    out = get_catalog().execute("get_current_time", {}, ToolContext(now=lambda: fixed))
    assert out["datetime"] == "2030-01-01T00:00:00+00:00"
    assert ToolContext.reference().now() == REFERENCE_NOW


def test_online_provider_is_pluggable() -> None:
    class FakeOnlineWeather:
        def current(self, location: str) -> dict[str, Any]:
            return {"location": location, "temperature_c": -3, "condition": "snow"}

    context = ToolContext(providers={"weather": FakeOnlineWeather()})
    out = get_catalog().execute("get_current_weather", {"location": "Anywhere"}, context)
    assert out == {"location": "Anywhere", "temperature_c": -3, "condition": "snow"}


def test_notes_are_isolated_per_session() -> None:
    catalog = get_catalog()
    store_owner = ToolContext.reference("alice")
    catalog.execute("save_note", {"title": "k", "content": "v"}, store_owner)
    other = ToolContext(notes=store_owner.notes, session_id="bob")
    with pytest.raises(ToolExecutionError, match="no note titled 'k'"):
        catalog.execute("read_note", {"title": "k"}, other)


@pytest.mark.parametrize(
    ("name", "arguments", "messages"),
    [
        ("calculate_math", {}, ["missing required argument 'expression'"]),
        ("calculate_math", {"expression": 5}, ["must be a string, got integer"]),
        ("calculate_math", {"expression": "1", "x": 1}, ["unexpected argument 'x'"]),
        (
            "unit_converter",
            {"value": "12", "from_unit": "km", "to_unit": "m"},
            ["'value' must be a number, got string"],
        ),
        (
            "unit_converter",
            {"value": float("nan"), "from_unit": "km", "to_unit": "m"},
            ["finite number"],
        ),
        ("get_current_weather", {"location": "Paris", "unit": "kelvin"}, ["must be one of"]),
        ("get_current_weather", {"location": ""}, ["must not be empty"]),
        (
            "get_exchange_rate",
            {"from_currency": "dollars", "to_currency": "EUR"},
            ["too long", "3-letter"],
        ),
        (
            "get_exchange_rate",
            {"from_currency": "USD", "to_currency": "EUR", "amount": -5},
            ["must be >= 0"],
        ),
        ("get_current_time", {"timezone": "Mars/Olympus"}, ["unknown timezone"]),
        (
            "date_calculator",
            {"operation": "add_days", "start_date": "2025-01-01"},
            ["needs the argument 'days'"],
        ),
        (
            "date_calculator",
            {"operation": "add_days", "start_date": "2025-01-01", "days": 1.5},
            ["must be an integer"],
        ),
        ("translate_text", {"text": "hi", "target_language": "klingon"}, ["must be one of"]),
    ],
)
def test_bad_arguments_get_messages_a_model_can_act_on(
    name: str, arguments: dict[str, Any], messages: list[str]
) -> None:
    with pytest.raises(ToolArgumentError) as info:
        get_catalog().validate(name, arguments)
    text = str(info.value)
    assert text.startswith(f"Invalid arguments for {name}")
    assert any(message in text for message in messages), text


def test_arguments_that_are_not_an_object_are_rejected() -> None:
    for bad in (None, [], "expression=1", 42):
        with pytest.raises(ToolArgumentError, match="must be a JSON object"):
            get_catalog().validate("calculate_math", bad)


def test_unknown_tool_names_the_available_ones() -> None:
    with pytest.raises(UnknownToolError, match="available tools: calculate_math"):
        get_catalog().get("search_web英文明确")


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("get_current_weather", {"location": "Atlantis"}, "no weather data"),
        (
            "translate_text",
            {"text": "the quick brown fox", "target_language": "french"},
            "no translation",
        ),
        ("get_exchange_rate", {"from_currency": "XXX", "to_currency": "EUR"}, "unknown currency"),
        ("lookup_price", {"product": "spaceship"}, "no product matching"),
        (
            "date_calculator",
            {"operation": "add_days", "start_date": "2025-02-30", "days": 1},
            "not a real calendar date",
        ),
        (
            "date_calculator",
            {"operation": "add_days", "start_date": "9999-12-31", "days": 5},
            "out of range",
        ),
        ("read_note", {"title": "never saved"}, "no note titled"),
    ],
)
def test_execution_errors_explain_what_to_do(
    name: str, arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolExecutionError, match=message):
        get_catalog().execute(name, arguments, ToolContext.reference())
