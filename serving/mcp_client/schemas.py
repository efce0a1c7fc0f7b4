"""Validation of the tool definitions a server hands us, before anything else sees them.

Why strict: a tool definition goes into the model's prompt (every rollout, every request),
into verl's tool config and into the front door's OpenAI schemas. A third-party server can
send anything: a name no chat template or OpenAI client accepts, an `inputSchema` that is not
an object schema, a megabyte of description, a schema nested a thousand levels deep. Each is
refused here with a message naming the server and the tool, every problem of a tool at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MCP_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
"""A tool name as the MCP specification allows it (2025-11-25: 1-128 of these characters)."""
EXPOSED_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
"""A name as the model and OpenAI clients see it (OpenAI's function-name rule): no dots."""
MAX_DESCRIPTION_CHARS = 8_192
MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 16
MAX_TOOLS_PER_SERVER = 512


class ToolSchemaError(ValueError):
    """A server's tool definitions are unusable; the message names server and tool(s)."""


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """One validated tool, as its server names it."""

    name: str
    description: str
    input_schema: dict[str, Any]

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(str(key) for key in self.input_schema.get("required") or ())


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a JSON value, counting stops past `limit` (no deep recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        children = (
            node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        )
        stack.extend((child, level + 1) for child in children)
    return deepest


def _schema_problems(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return [f"inputSchema must be a JSON object, got {type(schema).__name__}"]
    try:
        size = len(json.dumps(schema, ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        return [f"inputSchema is not JSON-serialisable: {exc}"]
    if size > MAX_SCHEMA_BYTES:
        return [f"inputSchema is {size} bytes, above the {MAX_SCHEMA_BYTES}-byte limit"]
    if _depth(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        return [f"inputSchema nests deeper than {MAX_SCHEMA_DEPTH} levels"]
    problems = []
    if schema.get("type") != "object":
        problems.append(f'inputSchema.type must be "object", got {schema.get("type")!r}')
    properties = schema.get("properties", {})
    if not isinstance(properties, dict) or not all(
        isinstance(prop, dict) for prop in properties.values()
    ):
        problems.append("inputSchema.properties must map each argument name to a schema object")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(key, str) for key in required):
        problems.append("inputSchema.required must be a list of argument names")
    if not problems:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            where = "/".join(str(part) for part in exc.absolute_path) or "(root)"
            problems.append(f"inputSchema is not a valid JSON Schema at {where}: {exc.message}")
    return problems


def validate_tool(server: str, raw: Any) -> ToolDefinition:
    """One `tools/list` entry as a `ToolDefinition`, or `ToolSchemaError` with every problem."""
    if not isinstance(raw, Mapping):
        raise ToolSchemaError(
            f"MCP server '{server}': a tools/list entry is {type(raw).__name__}, not an object"
        )
    name = raw.get("name")
    if not isinstance(name, str) or not MCP_NAME.fullmatch(name):
        shown = repr(name)[:80]
        raise ToolSchemaError(
            f"MCP server '{server}': tool name {shown} is not 1-128 characters of A-Z a-z 0-9 _ . -"
        )
    problems = []
    description = raw.get("description", "")
    if description is None:
        description = ""
    if not isinstance(description, str):
        problems.append(f"description must be a string, got {type(description).__name__}")
    elif len(description) > MAX_DESCRIPTION_CHARS:
        problems.append(
            f"description is {len(description)} characters, above {MAX_DESCRIPTION_CHARS}"
        )
    problems += _schema_problems(raw.get("inputSchema"))
    if problems:
        raise ToolSchemaError(f"MCP server '{server}', tool '{name}': " + "; ".join(problems))
    return ToolDefinition(name, str(description), dict(raw["inputSchema"]))


def validate_tools(server: str, raw_tools: list[Any]) -> list[ToolDefinition]:
    """Every entry of one server's `tools/list`, each validated; all problems in one error."""
    if len(raw_tools) > MAX_TOOLS_PER_SERVER:
        raise ToolSchemaError(
            f"MCP server '{server}' lists {len(raw_tools)} tools, above {MAX_TOOLS_PER_SERVER}"
        )
    tools, problems, seen = [], [], set()
    for raw in raw_tools:
        try:
            tool = validate_tool(server, raw)
        except ToolSchemaError as exc:
            problems.append(str(exc))
            continue
        if tool.name in seen:
            problems.append(f"MCP server '{server}' lists tool '{tool.name}' twice")
        seen.add(tool.name)
        tools.append(tool)
    if problems:
        raise ToolSchemaError("\n".join(problems))
    return tools
