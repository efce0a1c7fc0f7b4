"""Chat messages -> the transcript text the reward reads.

verl hands the reward one decoded string; TRL's GRPO trainer and the evaluation agent loop
hand it chat messages, where the tool calls may already be parsed out of the content into
`tool_calls`. Rendering them back in the rollout's call format (as the Qwen templates do) and
the tool messages as injected blocks makes every backend score through the same code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from training.rewards.samples import render_hermes, render_xml, tool_turn


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return {"__unparsed__": raw}
        return value if isinstance(value, dict) else {"__unparsed__": raw}
    return {}


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # multimodal parts: keep the text ones
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return str(content)


def transcript_from_messages(
    messages: Iterable[Mapping[str, Any]], call_format: str = "hermes"
) -> str:
    """Render assistant and tool messages (the completion, not the prompt) as verl would
    decode them: calls in `call_format`, tool output inside role-marked blocks."""
    render = render_xml if call_format == "qwen3_coder" else render_hermes
    parts: list[str] = []
    pending: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            pending.append(_content(message))
            continue
        if pending:
            parts.append(tool_turn(pending))
            pending = []
        if role != "assistant":
            continue
        text = _content(message)
        calls = []
        for call in message.get("tool_calls") or []:
            function = call.get("function", call) if isinstance(call, Mapping) else {}
            calls.append(
                render(str(function.get("name", "")), _arguments(function.get("arguments")))
            )
        if calls:
            text = (text.rstrip() + "\n" if text.strip() else "") + "\n".join(calls)
        parts.append(text)
    if pending:
        parts.append(tool_turn(pending))
    return "".join(parts)
