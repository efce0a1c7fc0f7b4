"""Generate verl's native tool-config YAML from a live MCP server's `tools/list`.

verl 0.9's tool schema keeps only `type`, `description` and `enum` per property: it drops
nested `items` and rejects `anyOf`. So each MCP input schema is flattened to that shape,
and everything removed is listed (in the returned report and as comments at the top of
the YAML), so nobody is surprised that, e.g., a `maxLength` is no longer visible to the
policy. The server still enforces the full schema on every call.

Does not import verl (4-5 s of torch import); the integration test loads the output with
verl's own loader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from serving.mcp_client.http import McpHttpClient

TOOL_CLASS = "training.verl_bridge.tool.McpTool"
KEPT = ("type", "description", "enum")
SIMPLE_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})


@dataclass
class FlattenReport:
    """What was removed or rewritten, as "tool.property: what" lines."""

    changes: list[str] = field(default_factory=list)

    def add(self, where: str, what: str) -> None:
        self.changes.append(f"{where}: {what}")


def _union_types(branches: Any) -> list[str] | None:
    """Types of an anyOf/oneOf whose branches are all plain `{"type": ...}`, else None."""
    if not isinstance(branches, list) or not branches:
        return None
    types: list[str] = []
    for branch in branches:
        kind = branch.get("type") if isinstance(branch, Mapping) else None
        if isinstance(kind, str) and kind in SIMPLE_TYPES:
            types.append(kind)
        elif isinstance(kind, list) and all(k in SIMPLE_TYPES for k in kind):
            types.extend(kind)
        else:
            return None
    return list(dict.fromkeys(types))


def flatten_property(where: str, prop: Mapping[str, Any], report: FlattenReport) -> dict[str, Any]:
    """One property schema reduced to verl's {type, description, enum}."""
    out: dict[str, Any] = {}
    kind = prop.get("type")
    union_key = next((k for k in ("anyOf", "oneOf") if k in prop), None)
    if isinstance(kind, str) or (isinstance(kind, list) and all(isinstance(k, str) for k in kind)):
        out["type"] = kind
    elif union_key is not None:
        types = _union_types(prop[union_key])
        if types is None:
            out["type"] = "string"
            report.add(where, f"{union_key} with complex branches replaced by type 'string'")
        else:
            out["type"] = types[0] if len(types) == 1 else types
            report.add(where, f"{union_key} flattened to type {out['type']!r}")
    else:
        out["type"] = "string"
        report.add(where, "no type given; assumed 'string'")
    if isinstance(prop.get("description"), str):
        out["description"] = prop["description"]
    if isinstance(prop.get("enum"), list):
        out["enum"] = list(prop["enum"])
    dropped = sorted(k for k in prop if k not in KEPT and k != union_key)
    if dropped:
        report.add(where, "dropped " + ", ".join(dropped))
    return out


def flatten_tool(tool: Mapping[str, Any], report: FlattenReport) -> dict[str, Any]:
    """An MCP `Tool` (from tools/list) as verl's OpenAI function tool schema."""
    name = str(tool["name"])
    schema: Mapping[str, Any] = tool.get("inputSchema") or {}
    properties: dict[str, Any] = {}
    for key, prop in (schema.get("properties") or {}).items():
        properties[key] = flatten_property(
            f"{name}.{key}", prop if isinstance(prop, Mapping) else {}, report
        )
    dropped = sorted(k for k in schema if k not in ("type", "properties", "required"))
    if dropped:
        report.add(name, "dropped top-level " + ", ".join(dropped))
    required = [r for r in schema.get("required") or [] if r in properties]
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": str(tool.get("description") or name),
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def build_tool_config(
    tools: list[dict[str, Any]],
    url: str | None,
    timeout_s: float = 30.0,
    max_concurrency: int = 64,
) -> tuple[dict[str, Any], FlattenReport]:
    """The tool-config document (verl's `tools:` list) and the flattening report."""
    report = FlattenReport()
    entries = []
    for tool in sorted(tools, key=lambda t: str(t["name"])):
        config: dict[str, Any] = {"type": "native", "timeout_s": timeout_s}
        config["max_concurrency"] = max_concurrency
        if url:
            config["url"] = url
        entries.append(
            {
                "class_name": TOOL_CLASS,
                "config": config,
                "tool_schema": flatten_tool(tool, report),
            }
        )
    return {"tools": entries}, report


def render_yaml(document: dict[str, Any], report: FlattenReport, source: str) -> str:
    header = [
        f"# verl tool config generated by `toolrl mcp tool-config` from {source}",
        f"# {len(document['tools'])} tools, each forwarded to the MCP server by {TOOL_CLASS}.",
        "# verl keeps only type/description/enum per property; the server still enforces the",
        "# full schema. Flattened:" if report.changes else "# Nothing had to be flattened.",
        *[f"#   {line}" for line in report.changes],
    ]
    body = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
    return "\n".join(header) + "\n" + body


async def fetch_tools(url: str, token: str | None, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    client = McpHttpClient(url, token, timeout_s=timeout_s, max_concurrency=4)
    try:
        return await client.list_tools()
    finally:
        await client.close()


def write_tool_config(
    url: str,
    out: Path,
    token: str | None = None,
    embed_url: bool = True,
    timeout_s: float = 30.0,
) -> FlattenReport:
    """Read tools/list from `url` and write the YAML to `out`. Returns the report."""
    tools = asyncio.run(fetch_tools(url, token, timeout_s))
    document, report = build_tool_config(tools, url if embed_url else None, timeout_s)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_yaml(document, report, url), encoding="utf-8")
    return report
