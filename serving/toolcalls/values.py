"""Schema-typed conversion of qwen3_coder parameter values.

The XML format carries every value as text; what the tool receives depends on the declared
type. The rules mirror verl's `Qwen3XMLToolParser.convert_param_value` (so the reward judges
the arguments verl actually executes), with two deliberate differences: an invalid boolean
stays a string (verl silently turns it into False, hiding the error from the schema check),
and object/array values try JSON before Python-literal syntax (verl's literal-only path turns
`[1, true]` into a string). Python literals are read with `ast.literal_eval` only for short
values, so a 1 MB or deeply nested parameter cannot stall the reward.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from typing import Any

MAX_LITERAL_CHARS = 20_000
_STRING_TYPES = frozenset({"string", "str", "text", "varchar", "char", "enum"})
_INT_PREFIXES = ("int", "uint", "long", "short", "unsigned")


def _declared_type(prop: Any) -> str:
    if isinstance(prop, Mapping) and "type" in prop:
        return str(prop["type"]).strip().lower()
    return "string"


def _to_number(raw: str) -> Any:
    try:
        value = float(raw)
        return value if value - int(value) != 0 else int(value)
    except (ValueError, OverflowError):
        return raw


def _to_structured(raw: str, declared: str) -> Any:
    if declared == "object" or declared.startswith("dict") or declared in ("array", "list"):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            pass
    if len(raw) > MAX_LITERAL_CHARS:
        return raw
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw


def convert_value(raw: str, name: str, properties: Mapping[str, Any]) -> Any:
    """Convert one raw parameter text to the value the tool will receive."""
    if raw.lower() == "null":
        return None
    if name not in properties:
        return raw
    declared = _declared_type(properties[name])
    if declared in _STRING_TYPES:
        return raw
    if declared.startswith(_INT_PREFIXES):
        try:
            return int(raw)
        except ValueError:
            return raw
    if declared.startswith(("num", "float")):
        return _to_number(raw)
    if declared in ("boolean", "bool", "binary"):
        lowered = raw.lower()
        return lowered == "true" if lowered in ("true", "false") else raw
    return _to_structured(raw, declared)
