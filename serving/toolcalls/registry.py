"""What the parser needs to know about tools: names, parameter schemas, and a validator.

Which tools a process judges by: the built-in catalog, unless a run trains or evaluates on a
pack dataset; then the dataset's tool snapshot (`tools.json`, the server's schemas as the
rows were checked against) is installed with `using_registry`, and every default
(`active_registry()`: the parser, the reward, the drift count) reads it. The installed
registry is a context variable: each asyncio task sees the one of the context it was created
in (and what it installs itself stays its own), and each thread starts with none installed,
so two evaluations in one process never judge by each other's tools. A thread that should
judge by its parent's registry runs in a copy of the parent's context
(`contextvars.copy_context().run`, or `asyncio.to_thread`, which copies it). verl's reward
workers, which run in other processes, get it through `TOOLRL_TOOL_SNAPSHOT` (a `tools.json`
path).

Why not use the catalog directly: the parser must also judge outputs that name tools from
other catalogs (verl issue 6252's `search_web`, BFCL functions), so it takes this small
adapter, built from our catalog by default or from any list of OpenAI function schemas.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
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


SNAPSHOT_ENV = "TOOLRL_TOOL_SNAPSHOT"
"""A `tools.json` path: the registry of every process that inherits it (verl's workers)."""
_ACTIVE: ContextVar[ToolRegistry | None] = ContextVar("toolrl_tool_registry", default=None)
"""The innermost `using_registry` of the current context (None: none installed)."""


def snapshot_registry(tools: Iterable[Mapping[str, Any]]) -> ToolRegistry:
    """A registry from a dataset's tool snapshot (`[{name, inputSchema, ...}]`, the
    `tools.json` layout) or OpenAI function schemas: JSON Schema checks only, since a
    third-party tool has no semantic validator here (its server is the judge at run time)."""
    schemas: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        if "inputSchema" in tool:
            schemas[str(tool["name"])] = tool.get("inputSchema") or {}
        else:
            function = tool.get("function", tool)
            schemas[str(function["name"])] = function.get("parameters", {}) or {}
    return ToolRegistry(schemas=schemas)


@cache
def _registry_from_file(path: str, mtime_ns: int) -> ToolRegistry:
    return snapshot_registry(json.loads(Path(path).read_text(encoding="utf-8")))


def registry_from_file(path: Path) -> ToolRegistry:
    """`snapshot_registry` of a `tools.json`, cached per file version (one object per
    snapshot keeps the per-registry parse and truth caches warm)."""
    resolved = path.resolve()
    return _registry_from_file(str(resolved), resolved.stat().st_mtime_ns)


def active_registry() -> ToolRegistry:
    """The registry defaults resolve to: the innermost `using_registry`, else the snapshot
    named by `TOOLRL_TOOL_SNAPSHOT`, else the built-in catalog."""
    installed = _ACTIVE.get()
    if installed is not None:
        return installed
    named = os.environ.get(SNAPSHOT_ENV)
    if named:
        return registry_from_file(Path(named))
    return catalog_registry()


@contextlib.contextmanager
def using_registry(registry: ToolRegistry | None) -> Iterator[ToolRegistry]:
    """Judge calls by `registry` inside the block, in this context only (None: leave the
    default in place). Blocks nest; leaving one restores what was installed before it."""
    if registry is None:
        yield active_registry()
        return
    token = _ACTIVE.set(registry)
    try:
        yield registry
    finally:
        _ACTIVE.reset(token)
