"""What the built-in tools share: JSON-schema builders for their arguments, the context's
providers, and the rounding of their numeric results.

Why shared: every tool's schema has the same shape (a closed object of bounded strings),
and a result rounded two ways would make ground truth disagree with a rollout.
"""

from __future__ import annotations

from typing import Any

from serving.tools.base import ToolContext
from serving.tools.providers import DEFAULT_PROVIDERS


def provider(context: ToolContext, key: str) -> Any:
    """The context's provider for `key`, else the offline default."""
    return context.providers.get(key) or DEFAULT_PROVIDERS[key]


def rounded(value: float, digits: int = 4) -> float:
    """`value` to `digits` decimals, through its text form (no binary float tail)."""
    return float(f"{value:.{digits}f}")


def string_property(description: str, max_length: int = 200, **extra: Any) -> dict[str, Any]:
    """A non-empty string argument of at most `max_length` characters."""
    return {
        "type": "string",
        "description": description,
        "maxLength": max_length,
        "minLength": 1,
        **extra,
    }


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A tool's arguments: these properties, these required, nothing else."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
