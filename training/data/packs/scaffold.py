"""A starting pack from a server's tool schemas (`toolrl tools pack init`), to be edited.

Why generate it rather than document the format only: the tedious, error-prone part of a
pack is matching every tool's argument names and types; the scaffold gets those right from
the `inputSchema` (enums become value lists, numbers ranges within their bounds, strings
TODO examples), so it passes `pack validate` as written and the author edits phrasings and
values instead of fighting the schema.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from training.data.packs.execute import ServerTool

HEADER = """\
# Task pack for MCP server {server!r}, written by `toolrl tools pack init` from its schemas.
# Edit before use: replace every TODO phrasing and value. Template ids (t1, t2, ...) decide
# train/test for good: edit a text, keep its id; add phrasings with new ids.
# Format: docs/parts/packs.md. Check it: toolrl tools pack validate {path}
"""


def _identifier(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return cleaned if re.match(r"[A-Za-z_]", cleaned) else f"t_{cleaned}"


def example_value(schema: Mapping[str, Any], depth: int = 0) -> Any:
    """A value that fits `schema` (for arrays and objects nested in arguments)."""
    if depth > 6:
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        properties = schema.get("properties") or {}
        required = schema.get("required") or list(properties)
        return {
            key: example_value(properties.get(key) or {}, depth + 1)
            for key in required
            if isinstance(properties.get(key), Mapping)
        }
    if kind == "array":
        items = schema.get("items")
        return [example_value(items if isinstance(items, Mapping) else {}, depth + 1)]
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.5))
    if kind == "boolean":
        return True
    return "TODO"


def slot_for(name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """A slot spec for one argument, from its schema."""
    if schema.get("enum"):
        return {"values": list(schema["enum"])}
    kind = schema.get("type")
    if kind == "integer":
        low = int(schema.get("minimum", 1))
        high = int(schema.get("maximum", low + 9))
        return {"range": {"min": low, "max": max(low, high)}}
    if kind == "number":
        start = float(schema.get("minimum", 1.0))
        return {"values": [start, start + 1.5, start + 10.0]}
    if kind == "boolean":
        return {"values": [True, False]}
    if kind in ("array", "object"):
        return {"values": [example_value(schema)]}
    return {"values": [f"TODO {name} example 1", f"TODO {name} example 2"]}


def scaffold_pack(
    server: str, tools: Mapping[str, ServerTool], source: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The pack as a mapping: one single-call intent per tool, one irrelevance intent, and a
    clarification intent for the first tool with a required argument."""
    intents: list[dict[str, Any]] = []
    clarification: dict[str, Any] | None = None
    for tool in sorted(tools.values(), key=lambda t: t.name):
        properties = tool.input_schema.get("properties") or {}
        required = [str(r) for r in tool.input_schema.get("required") or [] if r in properties]
        slots = {_identifier(arg): slot_for(arg, properties[arg]) for arg in required}
        shown = " ".join(
            f"{{{_identifier(arg)}}}" for arg in required if _is_scalar(properties[arg])
        )
        intents.append(
            {
                "name": _identifier(tool.name),
                "category": "single",
                "slots": slots,
                "phrasings": {
                    "en": {
                        "t1": f"TODO: ask for what {tool.name} does, with {shown or 'no details'}.",
                        "t2": f"TODO: say it another way ({tool.name}) {shown}".rstrip() + ".",
                    }
                },
                "steps": [
                    {
                        "tool": tool.name,
                        "arguments": {arg: f"{{{_identifier(arg)}}}" for arg in required},
                    }
                ],
            }
        )
        if clarification is None and required:
            clarification = {
                "name": f"{_identifier(tool.name)}_missing_{_identifier(required[0])}",
                "category": "clarification",
                "phrasings": {
                    "en": {
                        "t1": f"TODO: ask for {tool.name} without saying the {required[0]}.",
                        "t2": f"TODO: another {tool.name} request that leaves out {required[0]}.",
                    }
                },
                "missing": {"tool": tool.name, "argument": required[0]},
            }
    intents.append(
        {
            "name": "no_tool_needed",
            "category": "irrelevance",
            "phrasings": {
                "en": {
                    "t1": "TODO: a question none of these tools helps with.",
                    "t2": "TODO: another request to answer without any tool.",
                }
            },
        }
    )
    if clarification is not None:
        intents.append(clarification)
    pack: dict[str, Any] = {"pack": _identifier(server), "server": server}
    if source is not None:
        pack["source"] = dict(source)
    pack["languages"] = {"en": 1.0}
    pack["intents"] = intents
    return pack


def _is_scalar(schema: Mapping[str, Any]) -> bool:
    return schema.get("type") not in ("array", "object")


def scaffold_text(
    server: str,
    tools: Mapping[str, ServerTool],
    path: str,
    source: Mapping[str, Any] | None = None,
) -> str:
    body = yaml.safe_dump(
        scaffold_pack(server, tools, source), sort_keys=False, allow_unicode=True, width=100
    )
    return HEADER.format(server=server, path=path) + body
