"""The chat-completions request the front door accepts, checked field by field.

Why by hand and not one pydantic model: OpenAI's own error for a bad request names the field
and says what it must be ("temperature must be a number between 0 and 2"); client code and
people read that message, so each known field has one rule and one sentence. Unknown fields
are ignored, as OpenAI ignores them. Fields the front door cannot honour (`n > 1`,
`logprobs`, JSON response formats) are refused with 400, never silently dropped: a client
that set them would otherwise get something other than what it asked for.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from serving.agent import Message, ToolChoice

ROLES = frozenset({"system", "user", "assistant", "tool"})
FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_CLIENT_TOOLS = 128
MAX_OUTPUT_TOKENS = 32_768


class RequestError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


@dataclass(frozen=True)
class ChatRequest:
    """A validated request: what the episode needs, in the upstream's field names."""

    messages: list[Message]
    stream: bool = False
    include_usage: bool = False
    sampling: dict[str, Any] = field(default_factory=dict)
    tool_choice: ToolChoice = "auto"
    client_tools: list[Message] = field(default_factory=list)


def _bad(name: str, rule: str) -> RequestError:
    return RequestError(400, f"{name} {rule}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _content(value: Any, index: int) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list):  # OpenAI content parts: only text is supported
        parts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise RequestError(400, f"messages[{index}]: only text content is supported")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise RequestError(400, f"messages[{index}].content must be a string")


def _tool_calls(calls: list[Any], index: int) -> list[dict[str, Any]]:
    """Earlier assistant tool calls, re-shaped to exactly the OpenAI fields."""
    clean = []
    for call in calls[:64]:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RequestError(400, f"messages[{index}].tool_calls: each needs function.name")
        arguments = function.get("arguments", "{}")
        clean.append(
            {
                "id": str(call.get("id", ""))[:200],
                "type": "function",
                "function": {
                    "name": function["name"][:200],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
    return clean


def parse_messages(body: dict[str, Any], max_messages: int) -> list[Message]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list")
    if len(messages) > max_messages:
        raise RequestError(400, f"at most {max_messages} messages")
    clean: list[Message] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise RequestError(400, f"messages[{i}] needs a role in {sorted(ROLES)}")
        item: Message = {"role": message["role"], "content": _content(message.get("content"), i)}
        if message["role"] == "tool":
            item["tool_call_id"] = str(message.get("tool_call_id", ""))[:200]
        if message["role"] == "assistant" and isinstance(message.get("tool_calls"), list):
            item["tool_calls"] = _tool_calls(message["tool_calls"], i)
        clean.append(item)
    if clean[-1]["role"] not in ("user", "tool"):
        raise RequestError(400, "the last message must be from the user (or a tool)")
    return clean


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    sampling: dict[str, Any] = {}
    temperature = body.get("temperature")
    if temperature is not None:
        if not _is_number(temperature) or not 0 <= temperature <= 2:
            raise _bad("temperature", "must be a number between 0 and 2")
        sampling["temperature"] = float(temperature)
    top_p = body.get("top_p")
    if top_p is not None:
        if not _is_number(top_p) or not 0 < top_p <= 1:
            raise _bad("top_p", "must be a number in (0, 1]")
        sampling["top_p"] = float(top_p)
    for name in ("max_completion_tokens", "max_tokens"):  # the newer name wins
        value = body.get(name)
        if value is None:
            continue
        if not _is_int(value) or not 1 <= value <= MAX_OUTPUT_TOKENS:
            raise _bad(name, f"must be an integer between 1 and {MAX_OUTPUT_TOKENS}")
        sampling.setdefault("max_tokens", value)
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if (
            not isinstance(stops, list)
            or not 1 <= len(stops) <= 4
            or not all(isinstance(s, str) and s for s in stops)
        ):
            raise _bad("stop", "must be a string or a list of 1 to 4 non-empty strings")
        sampling["stop"] = stops
    seed = body.get("seed")
    if seed is not None:
        if not _is_int(seed):
            raise _bad("seed", "must be an integer")
        sampling["seed"] = seed
    return sampling


def _refuse_unsupported(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None:
        if not _is_int(n):
            raise _bad("n", "must be an integer")
        if n != 1:
            raise _bad("n", "must be 1: the front door runs one episode per request")
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise _bad("logprobs", "must be a boolean")
    if logprobs or body.get("top_logprobs") is not None:
        raise RequestError(400, "logprobs are not available: an answer spans several model calls")
    response_format = body.get("response_format")
    if response_format is not None:
        if not isinstance(response_format, dict) or not isinstance(
            response_format.get("type"), str
        ):
            raise _bad("response_format", "must be an object with a type")
        if response_format["type"] != "text":
            raise RequestError(
                400,
                f"response_format {response_format['type']!r} is not supported: the agent "
                "answers in free text after its tool calls (use 'text' or leave it out)",
            )
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise _bad("parallel_tool_calls", "must be a boolean")


def _client_tools(body: dict[str, Any]) -> list[Message]:
    tools = body.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list) or len(tools) > MAX_CLIENT_TOOLS:
        raise _bad("tools", f"must be a list of at most {MAX_CLIENT_TOOLS} function tools")
    clean: list[Message] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type") != "function"
            or not isinstance(function, dict)
        ):
            raise _bad(f"tools[{i}]", "must be {'type': 'function', 'function': {...}}")
        name = function.get("name")
        if not isinstance(name, str) or not FUNCTION_NAME.match(name):
            raise _bad(f"tools[{i}].function.name", "must match ^[A-Za-z0-9_-]{1,64}$")
        if name in seen:
            raise _bad(f"tools[{i}].function.name", f"{name!r} is listed twice")
        seen.add(name)
        description = function.get("description", "")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(description, str):
            raise _bad(f"tools[{i}].function.description", "must be a string")
        if not isinstance(parameters, dict):
            raise _bad(f"tools[{i}].function.parameters", "must be a JSON Schema object")
        clean.append(
            {
                "type": "function",
                "function": {"name": name, "description": description, "parameters": parameters},
            }
        )
    return clean


def _tool_choice(body: dict[str, Any]) -> ToolChoice:
    choice = body.get("tool_choice")
    if choice is None:
        return "auto"
    if choice in ("auto", "none", "required"):
        return str(choice)
    function = choice.get("function") if isinstance(choice, dict) else None
    if (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and isinstance(function, dict)
        and isinstance(function.get("name"), str)
        and function["name"]
    ):
        return str(function["name"])
    raise _bad(
        "tool_choice",
        "must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}",
    )


def parse_chat_request(body: Any, max_messages: int) -> ChatRequest:
    """Validate a chat-completions body; RequestError(400) naming the first bad field."""
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("stream", "must be a boolean")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise _bad("stream_options", "is only allowed when stream is true")
        if not isinstance(options, dict):
            raise _bad("stream_options", "must be an object")
        usage = options.get("include_usage", False)
        if not isinstance(usage, bool):
            raise _bad("stream_options.include_usage", "must be a boolean")
        include_usage = usage
    _refuse_unsupported(body)
    return ChatRequest(
        messages=parse_messages(body, max_messages),
        stream=stream,
        include_usage=include_usage,
        sampling=_sampling(body),
        tool_choice=_tool_choice(body),
        client_tools=_client_tools(body),
    )


def check_tool_names(request: ChatRequest, server_tools: set[str]) -> None:
    """The client's tools must not shadow the server's MCP tools (which would run where?),
    and a named tool_choice must name a tool the model is shown."""
    clash = sorted({t["function"]["name"] for t in request.client_tools} & server_tools)
    if clash:
        raise RequestError(
            400,
            f"tools: {clash} are already server-side MCP tools of this endpoint; rename the "
            "client's tools (the server's run here, the client's are returned to it)",
        )
    choice = request.tool_choice
    if choice not in ("auto", "none", "required"):
        known = server_tools | {t["function"]["name"] for t in request.client_tools}
        if choice not in known:
            raise _bad("tool_choice", f"names {choice!r}, which is not among the tools")
