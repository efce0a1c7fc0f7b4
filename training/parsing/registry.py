"""What the parser needs to know about tools: names, parameter schemas, and a validator.

Why not use the catalog directly: the parser must also judge outputs that name tools from
other catalogs (verl issue 6252's `search_web`, BFCL functions), so it takes this small
adapter, built from our catalog by default or from any list of OpenAI function schemas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from serving.tools import ToolArgumentError, get_catalog
from serving.tools.schema import validate_arguments

Validator = Callable[[Mapping[str, Any]], tuple[dict[str, Any], list[str]]]


def _schema_validator(name: str, schema: Mapping[str, Any]) -> Validator:
    def validate(arguments: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        return validate_arguments(name, schema, arguments)

    return validate


@dataclass(frozen=True, eq=False)
class ToolRegistry:
    """Tool name -> parameter JSON schema, plus a validator returning (cleaned, problems).
    Hashed by identity, so per-registry caches (the reward's ground-truth cache) work."""

    schemas: Mapping[str, Mapping[str, Any]]
    validators: Mapping[str, Validator] = field(default_factory=dict)
    parse_cache: dict[str, Any] = field(default_factory=dict, repr=False)
    """Well-formed call text -> its checked parse (see `fast_path`); bounded, per registry
    because conversion and validation depend on the schemas."""

    def __contains__(self, name: object) -> bool:
        return name in self.schemas

    def properties(self, name: str) -> Mapping[str, Any]:
        schema = self.schemas.get(name)
        if schema is None:
            return {}
        props = schema.get("properties", {})
        return props if isinstance(props, Mapping) else {}

    def validate(self, name: str, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Validate arguments; never raises (validators are tool code and may have bugs)."""
        validator = self.validators.get(name)
        if validator is None:
            validator = _schema_validator(name, self.schemas.get(name, {}))
        try:
            return validator(arguments)
        except Exception as exc:  # a tool's semantic check must not crash the reward
            return {}, [f"validator error: {type(exc).__name__}"]

    @classmethod
    def from_openai_schemas(cls, tools: Iterable[Mapping[str, Any]]) -> ToolRegistry:
        """Build from `[{"type": "function", "function": {"name", "parameters"}}]`."""
        schemas: dict[str, Mapping[str, Any]] = {}
        for tool in tools:
            function = tool.get("function", tool)
            schemas[str(function["name"])] = function.get("parameters", {}) or {}
        return cls(schemas=schemas)


def _catalog_validator(name: str) -> Validator:
    tool = get_catalog().get(name)

    def validate(arguments: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        try:
            return tool.validate(dict(arguments)), []
        except ToolArgumentError as exc:
            return {}, list(exc.problems)

    return validate


@cache
def catalog_registry() -> ToolRegistry:
    """The project's tool catalog as a registry (schema checks + the tools' semantic checks)."""
    catalog = get_catalog()
    return ToolRegistry(
        schemas={tool.name: tool.parameters for tool in catalog},
        validators={tool.name: _catalog_validator(tool.name) for tool in catalog},
    )
