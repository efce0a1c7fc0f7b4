"""An upstream's `stream=true` reply, put back together: the prose as it arrives, the calls,
the usage.

OpenAI-style servers send a call in pieces (`tool_calls[i]` deltas: the id and name once,
the arguments as string fragments) and the usage in a last chunk with no choices. Every
chunk is untrusted: a non-object, a non-string fragment or an absurd call index is a
`TransportError` naming the server, never a crash or an unbounded buffer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from serving.agent.types import TransportError

MAX_CALLS = 64
"""Calls one streamed turn may carry; more is a broken or hostile server."""


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamedReply:
    """The chunks of one streamed chat completion, accumulated."""

    url: str
    content: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    done: bool = False
    """`data: [DONE]` arrived."""
    finish_reason: str | None = None
    """The choice's finish reason, once sent. Some servers (`transformers serve`) end a
    stream after it without `[DONE]`; a stream with neither ended early."""

    @property
    def complete(self) -> bool:
        return self.done or self.finish_reason is not None

    def add_line(self, line: str) -> str:
        """One SSE line; returns the content it adds ('' for none). Comments, blank lines
        and other event fields are skipped, as the SSE format says."""
        if not line.startswith("data:"):
            return ""
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return ""
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise TransportError(f"{self.url}: a stream chunk is not JSON ({exc})") from exc
        return self.add_chunk(chunk)

    def add_chunk(self, chunk: Any) -> str:
        if not isinstance(chunk, Mapping):
            raise TransportError(f"{self.url}: a stream chunk is not a JSON object")
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, Mapping) else error
            raise TransportError(f"{self.url}: the stream ended in an error: {str(message)[:300]}")
        usage = chunk.get("usage")
        if isinstance(usage, Mapping):
            self.prompt_tokens = _int(usage.get("prompt_tokens")) or self.prompt_tokens
            self.completion_tokens = _int(usage.get("completion_tokens")) or self.completion_tokens
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return ""
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice, Mapping) else None
        if not isinstance(delta, Mapping):
            raise TransportError(f"{self.url}: a stream chunk's choice has no delta object")
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            self.finish_reason = reason
        for call in _list(delta.get("tool_calls"), self.url):
            self._add_call(call)
        text = delta.get("content")
        if text is None:
            return ""
        if not isinstance(text, str):
            raise TransportError(f"{self.url}: a stream chunk's content is not a string")
        self.content.append(text)
        return text

    def _add_call(self, call: Any) -> None:
        if not isinstance(call, Mapping):
            raise TransportError(f"{self.url}: a streamed tool call is not an object")
        index = call.get("index", len(self.calls))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_CALLS:
            raise TransportError(f"{self.url}: a streamed tool call has a bad index {index!r}")
        partial = self.calls.setdefault(index, _PartialCall())
        if isinstance(call.get("id"), str):
            partial.id = partial.id or call["id"]
        function = call.get("function") or {}
        if not isinstance(function, Mapping):
            raise TransportError(f"{self.url}: a streamed tool call's function is not an object")
        name, arguments = function.get("name"), function.get("arguments")
        if isinstance(name, str):
            partial.name += name
        if isinstance(arguments, str):
            partial.arguments.append(arguments)
        elif arguments is not None:
            partial.arguments.append(json.dumps(arguments))

    def tool_calls(self) -> list[dict[str, Any]]:
        """The calls in the plain reply's `tool_calls` shape, in index order."""
        return [
            {
                "id": partial.id or f"call_{index}",
                "type": "function",
                "function": {"name": partial.name, "arguments": "".join(partial.arguments)},
            }
            for index, partial in sorted(self.calls.items())
        ]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _list(value: Any, url: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TransportError(f"{url}: a stream chunk's tool_calls is not a list")
    return value
