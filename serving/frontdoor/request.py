"""The chat-completions request the front door accepts, checked field by field.

The rule for each OpenAI field (and its error sentence) is the one in
`serving/openai_request.py`, shared with the engine server; this module adds what only the
front door needs: the messages and client tools re-shaped for the agent loop, and the
refusals. Fields the front door cannot honour (`n > 1`, `logprobs`, JSON response formats)
are refused with 400, never silently dropped: a client that set them would otherwise get
something other than what it asked for.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import serving.openai_request as fields
from serving.agent import Message, ToolChoice
from serving.openai_request import OpenAIRequestError, bad

ROLES = frozenset({"system", "user", "assistant", "tool"})
FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_CLIENT_TOOLS = 128
MAX_OUTPUT_TOKENS = 32_768


@dataclass(frozen=True)
class ChatRequest:
    """A validated request: what the episode needs, in the upstream's field names."""

    messages: list[Message]
    stream: bool = False
    include_usage: bool = False
    sampling: dict[str, Any] = field(default_factory=dict)
    tool_choice: ToolChoice = "auto"
    client_tools: list[Message] = field(default_factory=list)


def _content(value: Any, index: int) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list):  # OpenAI content parts: only text is supported
        parts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise OpenAIRequestError(f"messages[{index}]: only text content is supported")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise OpenAIRequestError(f"messages[{index}].content must be a string")


def _tool_calls(calls: list[Any], index: int) -> list[dict[str, Any]]:
    """Earlier assistant tool calls, re-shaped to exactly the OpenAI fields."""
    clean = []
    for call in calls[:64]:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise OpenAIRequestError(f"messages[{index}].tool_calls: each needs function.name")
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
    messages = fields.message_list(body, max_messages)
    clean: list[Message] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise OpenAIRequestError(f"messages[{i}] needs a role in {sorted(ROLES)}")
        item: Message = {"role": message["role"], "content": _content(message.get("content"), i)}
        if message["role"] == "tool":
            item["tool_call_id"] = str(message.get("tool_call_id", ""))[:200]
        if message["role"] == "assistant" and isinstance(message.get("tool_calls"), list):
            item["tool_calls"] = _tool_calls(message["tool_calls"], i)
        clean.append(item)
    if clean[-1]["role"] not in ("user", "tool"):
        raise OpenAIRequestError("the last message must be from the user (or a tool)")
    return clean


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    """The sampling fields to forward upstream, under their upstream names."""
    values = {
        "temperature": fields.temperature(body),
        "top_p": fields.top_p(body),
        "max_tokens": fields.max_tokens(body, MAX_OUTPUT_TOKENS),
        "stop": fields.stop(body) or None,  # an empty list asks for nothing: not forwarded
        "seed": fields.seed(body),
    }
    return {name: value for name, value in values.items() if value is not None}


def _refuse_unsupported(body: dict[str, Any]) -> None:
    fields.single_choice(body, "the front door runs one episode per request")
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise bad("logprobs", "must be a boolean")
    if logprobs or body.get("top_logprobs") is not None:
        raise OpenAIRequestError("logprobs are not available: an answer spans several model calls")
    response_format = body.get("response_format")
    if response_format is not None:
        if not isinstance(response_format, dict) or not isinstance(
            response_format.get("type"), str
        ):
            raise bad("response_format", "must be an object with a type")
        if response_format["type"] != "text":
            raise OpenAIRequestError(
                f"response_format {response_format['type']!r} is not supported: the agent "
                "answers in free text after its tool calls (use 'text' or leave it out)",
            )
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad("parallel_tool_calls", "must be a boolean")


def _client_tools(body: dict[str, Any]) -> list[Message]:
    tools = body.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list) or len(tools) > MAX_CLIENT_TOOLS:
        raise bad("tools", f"must be a list of at most {MAX_CLIENT_TOOLS} function tools")
    clean: list[Message] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type") != "function"
            or not isinstance(function, dict)
        ):
            raise bad(f"tools[{i}]", "must be {'type': 'function', 'function': {...}}")
        name = function.get("name")
        if not isinstance(name, str) or not FUNCTION_NAME.match(name):
            raise bad(f"tools[{i}].function.name", "must match ^[A-Za-z0-9_-]{1,64}$")
        if name in seen:
            raise bad(f"tools[{i}].function.name", f"{name!r} is listed twice")
        seen.add(name)
        description = function.get("description", "")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(description, str):
            raise bad(f"tools[{i}].function.description", "must be a string")
        if not isinstance(parameters, dict):
            raise bad(f"tools[{i}].function.parameters", "must be a JSON Schema object")
        clean.append(
            {
                "type": "function",
                "function": {"name": name, "description": description, "parameters": parameters},
            }
        )
    return clean


def parse_chat_request(body: Any, max_messages: int) -> ChatRequest:
    """Validate a chat-completions body; OpenAIRequestError(400) naming the first bad field."""
    body = fields.require_object(body)
    stream = fields.stream_flags(body)
    _refuse_unsupported(body)
    return ChatRequest(
        messages=parse_messages(body, max_messages),
        stream=stream.stream,
        include_usage=stream.include_usage,
        sampling=_sampling(body),
        tool_choice=fields.tool_choice(body),
        client_tools=_client_tools(body),
    )


def check_tool_names(request: ChatRequest, server_tools: set[str]) -> None:
    """The client's tools must not shadow the server's MCP tools (which would run where?),
    and a named tool_choice must name a tool the model is shown."""
    clash = sorted({t["function"]["name"] for t in request.client_tools} & server_tools)
    if clash:
        raise OpenAIRequestError(
            f"tools: {clash} are already server-side MCP tools of this endpoint; rename the "
            "client's tools (the server's run here, the client's are returned to it)",
        )
    choice = request.tool_choice
    if choice not in ("auto", "none", "required"):
        known = server_tools | {t["function"]["name"] for t in request.client_tools}
        if choice not in known:
            raise bad("tool_choice", f"names {choice!r}, which is not among the tools")
