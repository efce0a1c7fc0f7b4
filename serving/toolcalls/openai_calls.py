"""Calls in a model's raw reply as OpenAI `tool_calls`: what a model server returns.

The CPU engine server answers `/v1/chat/completions` with this, so a served model's calls
are read by the same parser that scores them in training and evaluation (before, the
server had a regex of its own, with other acceptance rules). A reply is split into calls
only when every call attempt in it is well formed (`SYNTAX_KINDS` name what is not);
otherwise the whole reply stays content with no calls, so the client's own parser can say
what is wrong with it. Unknown tools and schema violations are still calls: the tool
server's error message is what tells the model to fix them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from serving.toolcalls.calls import CallFormat
from serving.toolcalls.errors import SYNTAX_KINDS
from serving.toolcalls.registry import ToolRegistry
from serving.toolcalls.tool_calls import parse_tool_calls

CALL_MARKERS = ("<tool_call", "<function=")


def split_tool_calls(
    text: str,
    tools: Sequence[Mapping[str, Any]] | None = None,
    call_format: CallFormat = "hermes",
) -> tuple[str, list[dict[str, Any]]]:
    """(content before the first call, OpenAI `tool_calls`), or (text, []) when the reply
    has no call or any call attempt is malformed. `tools` (OpenAI function schemas) are
    what the request offered: values are read by their schemas (XML calls)."""
    if not any(marker in text for marker in CALL_MARKERS):
        return text, []
    registry = ToolRegistry.from_openai_schemas(tools or [])
    parsed = parse_tool_calls(text, call_format, registry)
    broken = any(error.kind in SYNTAX_KINDS for call in parsed.calls for error in call.errors)
    if not parsed.calls or broken:
        return text, []
    calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:12]}_{index}",
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": json.dumps(call.arguments, ensure_ascii=False),
            },
        }
        for index, call in enumerate(parsed.calls)
    ]
    first = min(text.find(marker) for marker in CALL_MARKERS if marker in text)
    return text[:first].strip(), calls
