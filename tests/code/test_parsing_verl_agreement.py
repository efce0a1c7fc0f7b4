"""On well-formed output our parser returns exactly the calls verl's own parsers return.

verl's `hermes` and `qwen3_coder` parsers (`verl.experimental.agent_loop.tool_parser`) decode
token ids with the rollout tokenizer; a character-level tokenizer makes ids and text map 1:1,
so both parsers see the same string. The corpus renders every catalog tool's argument sets
the way the Qwen templates do, alone, in parallel, after reasoning, plus tools with boolean,
array and object parameters.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest

from serving.toolcalls import ToolRegistry, catalog_registry, parse_tool_calls
from serving.tools import get_catalog
from training.rewards.samples import VALID_ARGUMENTS, render_hermes, render_xml

tool_parser = pytest.importorskip("verl.experimental.agent_loop.tool_parser")
schemas = pytest.importorskip("verl.tools.schemas")

EXTRA_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "tag_items",
            "description": "x",
            "parameters": {
                "type": "object",
                "properties": {
                    "tags": {"type": "array", "description": "tags"},
                    "meta": {"type": "object", "description": "meta"},
                    "urgent": {"type": "boolean", "description": "flag"},
                    "count": {"type": "integer", "description": "n"},
                    "ratio": {"type": "number", "description": "r"},
                },
                "required": ["tags"],
            },
        },
    }
]
EXTRA_ARGS: list[dict[str, Any]] = [
    {"tags": ["a", "b c"], "meta": {"k": 1, "nested": {"x": [1, 2]}}, "urgent": True},
    {"tags": [], "urgent": False, "count": -7, "ratio": 0.25},
    {"tags": ["数据"], "meta": {}, "ratio": 3},
]


class CharTokenizer:
    """ids are code points: decode(encode(text)) == text for any text."""

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(map(chr, ids))

    @staticmethod
    def encode(text: str) -> list[int]:
        return [ord(ch) for ch in text]


def corpus() -> list[tuple[str, str]]:
    cases: list[tuple[str, str]] = []
    flat = [(n, a) for n, options in VALID_ARGUMENTS.items() for a in options]
    flat += [("tag_items", a) for a in EXTRA_ARGS]
    for fmt in ("hermes", "qwen3_coder"):
        render = render_xml if fmt == "qwen3_coder" else render_hermes
        for name, args in flat:
            cases.append((fmt, render(name, args)))
            cases.append((fmt, "Let me think about which tool fits.\n\n" + render(name, args)))
        for (n1, a1), (n2, a2) in itertools.islice(itertools.combinations(flat, 2), 0, None, 7):
            cases.append((fmt, render(n1, a1) + "\n" + render(n2, a2)))
    for name, args in flat:
        cases.append(("hermes", render_hermes(name, args, ascii_only=True)))
    return cases


def verl_calls(fmt: str, text: str, tools: list[Any]) -> list[tuple[str, Any]]:
    parser = tool_parser.ToolParser.get_tool_parser(fmt, CharTokenizer())
    _, calls = asyncio.run(parser.extract_tool_calls(CharTokenizer.encode(text), tools))
    return [(call.name, json.loads(call.arguments)) for call in calls]


def test_corpus_is_large_and_well_formed_for_our_parser() -> None:
    cases = corpus()
    registry = _registry()
    assert len(cases) > 150
    for fmt, text in cases:
        result = parse_tool_calls(text, fmt, registry)  # type: ignore[arg-type]
        assert result.errors == [], (text, result.errors)


def _registry() -> ToolRegistry:
    base = catalog_registry()
    extra = ToolRegistry.from_openai_schemas(EXTRA_TOOLS)
    return ToolRegistry(schemas={**base.schemas, **extra.schemas}, validators=dict(base.validators))


def test_calls_agree_with_verl_parsers_on_well_formed_corpus() -> None:
    registry = _registry()
    tools = [
        schemas.OpenAIFunctionToolSchema.model_validate(s)
        for s in [*get_catalog().openai_schemas(), *EXTRA_TOOLS]
    ]
    checked = 0
    for fmt, text in corpus():
        ours = [(c.name, c.arguments) for c in parse_tool_calls(text, fmt, registry).calls]  # type: ignore[arg-type]
        theirs = verl_calls(fmt, text, tools)
        assert ours == theirs, (fmt, text)
        assert ours, text
        checked += 1
    assert checked > 150


def test_verl_hermes_finds_no_call_in_xml_while_we_flag_the_format() -> None:
    text = render_xml("get_current_time", {"timezone": "UTC"})
    assert verl_calls("hermes", text, []) == []
    result = parse_tool_calls(text, "hermes")
    assert [e.kind.value for e in result.errors] == ["wrong_format"]
