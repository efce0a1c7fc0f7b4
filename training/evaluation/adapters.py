"""What the training side injects into the serving-side agent loop: the project's
tool-call parser and the model's chat template as a prompt renderer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from serving.agent import Message, PromptRenderer, RawCall, RawParse, RawParser
from serving.toolcalls import CallFormat, parse_tool_calls


def project_parser(call_format: CallFormat = "auto") -> RawParser:
    """`serving.toolcalls.parse_tool_calls` in the loop's RawParser shape."""

    def parse(text: str) -> RawParse:
        result = parse_tool_calls(text, call_format)
        calls = tuple(
            RawCall(call.name, dict(call.arguments), tuple(e.kind.value for e in call.errors))
            for call in result.calls
        )
        turn_kinds = tuple(e.kind.value for e in result.errors if e.call_index is None)
        return RawParse(calls, turn_kinds)

    return parse


def _template_ready(messages: Sequence[Message]) -> list[Message]:
    """Tool-call arguments as objects: the qwen3_coder (XML) template iterates over them."""
    ready: list[Message] = []
    for message in messages:
        calls = message.get("tool_calls")
        if not calls:
            ready.append(dict(message))
            continue
        fixed = []
        for call in calls:
            function = dict(call.get("function", {}))
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    function["arguments"] = json.loads(arguments)
                except ValueError:
                    function["arguments"] = {}
            fixed.append({**call, "function": function})
        ready.append({**message, "tool_calls": fixed})
    return ready


def chat_template_renderer(model_dir: Path) -> PromptRenderer:
    """Render with the served model's own tokenizer and chat template (exactly what the
    server would have rendered), so the raw path sees the same prompt."""
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(str(model_dir))

    def render(messages: Sequence[Message], tools: Sequence[Message]) -> str:
        text = tokenizer.apply_chat_template(
            _template_ready(messages),
            tools=list(tools) or None,
            tokenize=False,
            add_generation_prompt=True,
        )
        return str(text)

    return render
