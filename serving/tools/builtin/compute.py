"""The tools that compute from their arguments alone: `calculate_math`, `unit_converter`,
`date_calculator`. No provider, no state: the same call always gives the same result.
"""

from __future__ import annotations

import datetime as dt
import re
from functools import cache, lru_cache
from typing import Any

import pint

from serving.tools.base import Tool, ToolContext, ToolExecutionError
from serving.tools.builtin.common import object_schema, rounded, string_property
from serving.tools.safe_math import MathError, evaluate, format_number

_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


# --- calculate_math -----------------------------------------------------------------------
def _calculate(args: dict[str, Any], _: ToolContext) -> dict[str, Any]:
    try:
        value = evaluate(args["expression"])
    except MathError as exc:
        raise ToolExecutionError(f"cannot evaluate expression: {exc}") from exc
    return {"expression": args["expression"], "result": format_number(value)}


def calculate_math_tool() -> Tool:
    return Tool(
        "calculate_math",
        "Evaluate an arithmetic expression (+ - * / // % **, sqrt, "
        "log, sin, cos, factorial, round, min, max, pi, e) and return the exact result.",
        object_schema(
            {"expression": string_property("The expression, e.g. '256*37' or 'sqrt(2)*10'", 500)},
            ["expression"],
        ),
        _calculate,
        result_fields=("result",),
    )


# --- unit_converter -------------------------------------------------------------------------
@cache
def unit_registry() -> pint.UnitRegistry:  # type: ignore[type-arg]
    """One registry per process: building it costs ~100 ms, conversions then cost µs."""
    return pint.UnitRegistry(autoconvert_offset_to_baseunit=True)


_UNIT_ALIASES = {
    "celsius": "degC",
    "°c": "degC",
    "c": "degC",
    "fahrenheit": "degF",
    "°f": "degF",
    "f": "degF",
    "kelvin": "kelvin",
    "k": "kelvin",
    "miles": "mile",
    "mph": "mile/hour",
    "kph": "km/hour",
    "km/h": "km/hour",
    "kmh": "km/hour",
    "lbs": "pound",
    "lb": "pound",
    "kgs": "kg",
    "feet": "foot",
    "ft": "foot",
    "inches": "inch",
    "in": "inch",
    "litres": "liter",
    "liters": "liter",
    "l": "liter",
    "gallons": "gallon",
    "oz": "ounce",
}


@lru_cache(maxsize=1024)
def _unit(name: str) -> pint.Unit:
    """Resolve a unit name; cached because pint's parser dominates conversion time."""
    stripped = name.strip()
    candidates = [_UNIT_ALIASES.get(stripped.lower(), stripped), stripped.lower()]
    for key in candidates:
        try:
            return unit_registry().Unit(key)
        except Exception:  # noqa: S112 - pint's parser raises a zoo of types on garbage input
            continue
    raise ToolExecutionError(f"unknown unit {name[:30]!r}")


def _convert_units(args: dict[str, Any], _: ToolContext) -> dict[str, Any]:
    source, target = _unit(args["from_unit"]), _unit(args["to_unit"])
    registry = unit_registry()
    try:
        converted = registry.Quantity(args["value"], source).to(target).magnitude
    except pint.errors.DimensionalityError as exc:
        raise ToolExecutionError(
            f"cannot convert {args['from_unit']} to {args['to_unit']}: different kinds of quantity"
        ) from exc
    return {
        "value": args["value"],
        "from_unit": args["from_unit"],
        "to_unit": args["to_unit"],
        "result": rounded(float(converted)),
    }


def unit_converter_tool() -> Tool:
    return Tool(
        "unit_converter",
        "Convert a value between units of the same kind (length, mass, "
        "temperature, volume, speed, time, ...).",
        object_schema(
            {
                "value": {"type": "number", "description": "The value to convert"},
                "from_unit": string_property("Unit of the value, e.g. 'km', 'degF', 'pound'", 40),
                "to_unit": string_property("Target unit, e.g. 'mile', 'degC', 'kg'", 40),
            },
            ["value", "from_unit", "to_unit"],
        ),
        _convert_units,
        result_fields=("result",),
    )


# --- date_calculator ---------------------------------------------------------------------------
def _parse_date(name: str, value: str) -> dt.date:
    if not _DATE_RE.match(value):
        raise ToolExecutionError(f"argument '{name}' must be a date as YYYY-MM-DD")
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise ToolExecutionError(f"argument '{name}' is not a real calendar date") from exc


def _check_dates(args: dict[str, Any]) -> list[str]:
    operation = args["operation"]
    if operation == "add_days" and "days" not in args:
        return ["operation 'add_days' needs the argument 'days'"]
    if operation == "days_between" and "end_date" not in args:
        return ["operation 'days_between' needs the argument 'end_date'"]
    return []


def _dates(args: dict[str, Any], _: ToolContext) -> dict[str, Any]:
    start = _parse_date("start_date", args["start_date"])
    if args["operation"] == "add_days":
        try:
            result = start + dt.timedelta(days=args["days"])
        except OverflowError as exc:
            raise ToolExecutionError("resulting date is out of range") from exc
        return {
            "start_date": start.isoformat(),
            "days": args["days"],
            "result": result.isoformat(),
            "weekday": result.strftime("%A"),
        }
    end = _parse_date("end_date", args["end_date"])
    return {
        "start_date": start.isoformat(),
        "end_date": end.isoformat(),
        "result": (end - start).days,
    }


def date_calculator_tool() -> Tool:
    return Tool(
        "date_calculator",
        "Add days to a date, or count the days between two dates.",
        object_schema(
            {
                "operation": {
                    "type": "string",
                    "enum": ["add_days", "days_between"],
                    "description": "What to compute",
                },
                "start_date": string_property("Start date, YYYY-MM-DD", 10),
                "days": {
                    "type": "integer",
                    "description": "Days to add (add_days)",
                    "minimum": -100000,
                    "maximum": 100000,
                },
                "end_date": string_property("End date, YYYY-MM-DD (days_between)", 10),
            },
            ["operation", "start_date"],
        ),
        _dates,
        check=_check_dates,
        result_fields=("result",),
    )
