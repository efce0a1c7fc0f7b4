"""What every MCP transport shares: its errors, its call result, the client interface and
the names the project's own server is reached by (its URL and token env vars, headers).

Why a separate module: the agent loop, the verl bridge and the CPU backend catch the same
errors and read the same result whichever transport (streamable HTTP or stdio) carried the
call, so these types cannot belong to one transport.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

PROTOCOL_VERSION = "2025-06-18"
"""The handshake-era revision offered to servers that do not speak the modern one."""
KNOWN_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
"""Handshake-era revisions whose tools/list and tools/call this client reads correctly."""
CLIENT_INFO = {"name": "toolrl", "version": "1"}

# The project's own server: where it listens and the headers its clients send. Defined here,
# in the client package, because both sides need them and the server already builds on the
# client (replay and live mode call other servers through it); `serving.mcp_server.config`
# names them as well.
TOKEN_ENV = "TOOLRL_MCP_TOKEN"
"""Env var holding the bearer token; read when `--token` is not given."""
URL_ENV = "TOOLRL_MCP_URL"
"""Env var holding the server URL the bridge and tool-config generator use by default."""
DEFAULT_URL = "http://127.0.0.1:8000/mcp"
SESSION_HEADER = "x-toolrl-session"
"""Header naming the conversation a call belongs to (see docs/parts/mcp.md, session mapping)."""
SEQ_HEADER = "x-toolrl-call-seq"
"""Optional header: index of this call within its session (pins the mock fault draw)."""
SESSION_META_KEY = "toolrl/session"
"""The same, as a `_meta` key of `tools/call`, for clients that cannot set headers per call."""


class McpClientError(Exception):
    """Transport or protocol failure (not a tool error): unreachable, 401, 5xx, bad reply,
    a stdio server that cannot start, crashed or did not answer in time."""


class McpProtocolError(McpClientError):
    """The server answered with a JSON-RPC error object."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"MCP error {code}: {message}")
        self.code = code
        self.message = message

    def as_result(self) -> ToolCallResult:
        """The refusal as the tool error a model reads. The server answered (an unknown tool,
        arguments it would not take), so nothing failed in transport: the message names the
        tools there are, a model can recover from it, and an episode must not end on it.
        Every caller of `tools/call` turns a refusal into this one text (agent loop, verl
        tool, dataset recording), so training, evaluation and serving show it alike."""
        return ToolCallResult(f"Error: {self.message}", True)


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    """One `tools/call` answer: the text the model reads and whether it is a tool error."""

    text: str
    is_error: bool
    structured: Any = None


class McpClient(Protocol):
    """The interface both transports implement (a superset of `serving.agent.types.
    ToolExecutor`, which the agent loop needs): list, call, and release resources."""

    async def list_tools(self) -> list[dict[str, Any]]: ...

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        session: str | None = None,
        seq: int | None = None,
    ) -> ToolCallResult: ...

    async def close(self) -> None: ...


def text_of(result: Mapping[str, Any]) -> str:
    """The text a model reads from a `tools/call` result: text blocks joined, other blocks
    named, structured content as JSON when there is no text at all."""
    parts = []
    for block in result.get("content") or []:
        if isinstance(block, Mapping):
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            else:
                parts.append(f"[{block.get('type', 'unknown')} content omitted]")
    if not parts and result.get("structuredContent") is not None:
        return json.dumps(result["structuredContent"], ensure_ascii=False)
    return "\n".join(parts)


def call_result(result: Mapping[str, Any]) -> ToolCallResult:
    """A `tools/call` result object as a `ToolCallResult`."""
    return ToolCallResult(
        text_of(result), bool(result.get("isError")), result.get("structuredContent")
    )
