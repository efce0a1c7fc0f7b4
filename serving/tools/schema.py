"""A small validator for the JSON-schema subset our tool schemas use.

Why not `jsonschema`: tool arguments arrive from a policy model thousands of times per
training step, the error text is shown back to that model, and the subset we need (object,
string, number, integer, boolean, enum, bounds, required, no extra keys) is tiny. Messages
are written for a model to act on: they name the argument, what was expected, what came.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

JSON_TYPES = ("string", "number", "integer", "boolean", "object", "array")
MAX_STRING_CHARS = 10_000


def json_type_name(value: Any) -> str:
    """The JSON Schema type a value has, as error messages name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _preview(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_value(name: str, value: Any, prop: Mapping[str, Any]) -> tuple[Any, str | None]:
    """Check one argument against its property schema.

    Returns the (possibly widened) value and an error message or None. Integers are accepted
    where numbers are expected and widened to float; nothing else is coerced, because a model
    that sends "12" for a number should learn to send 12.
    """
    expected = prop.get("type", "string")
    actual = json_type_name(value)
    if expected == "number":
        if actual not in ("number", "integer"):
            return value, f"argument '{name}' must be a number, got {actual} {_preview(value)}"
        if not math.isfinite(float(value)):
            return value, f"argument '{name}' must be a finite number, got {_preview(value)}"
        value = float(value)
    elif expected == "integer":
        if actual != "integer":
            if actual == "number" and float(value).is_integer():
                value = int(value)
            else:
                return (
                    value,
                    f"argument '{name}' must be an integer, got {actual} {_preview(value)}",
                )
    elif expected != actual:
        return value, f"argument '{name}' must be a {expected}, got {actual} {_preview(value)}"

    if isinstance(value, str):
        max_len = int(prop.get("maxLength", MAX_STRING_CHARS))
        if len(value) > max_len:
            return value, f"argument '{name}' is too long ({len(value)} characters, max {max_len})"
        if prop.get("minLength", 0) and len(value.strip()) < int(prop["minLength"]):
            return value, f"argument '{name}' must not be empty"
    if "enum" in prop and value not in prop["enum"]:
        allowed = ", ".join(repr(v) for v in prop["enum"])
        return value, f"argument '{name}' must be one of {allowed}; got {_preview(value)}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in prop and value < prop["minimum"]:
            return value, f"argument '{name}' must be >= {prop['minimum']}, got {value}"
        if "maximum" in prop and value > prop["maximum"]:
            return value, f"argument '{name}' must be <= {prop['maximum']}, got {value}"
    return value, None


def validate_arguments(
    tool_name: str, schema: Mapping[str, Any], arguments: Any
) -> tuple[dict[str, Any], list[str]]:
    """Validate a call's arguments; return the normalised arguments and every problem found.

    All problems are reported at once (not just the first), so one error message teaches the
    model everything that was wrong with the call.
    """
    if not isinstance(arguments, Mapping):
        return {}, [
            f"arguments for '{tool_name}' must be a JSON object, got {json_type_name(arguments)}"
        ]
    properties: Mapping[str, Any] = schema.get("properties", {})
    errors: list[str] = []
    cleaned: dict[str, Any] = {}
    for key in arguments:
        if not isinstance(key, str) or key not in properties:
            allowed = ", ".join(sorted(properties)) or "none"
            errors.append(f"unexpected argument {_preview(key)} (allowed: {allowed})")
    for key in schema.get("required", []):
        if key not in arguments or arguments[key] is None:
            errors.append(f"missing required argument '{key}'")
    for key, prop in properties.items():
        if key not in arguments or arguments[key] is None:
            if "default" in prop:
                cleaned[key] = prop["default"]
            continue
        value, error = check_value(key, arguments[key], prop)
        if error:
            errors.append(error)
        else:
            cleaned[key] = value
    return cleaned, errors
