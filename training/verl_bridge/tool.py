"""`McpTool`: a native verl tool that forwards each call to the MCP tool server.

verl 0.9 removed its MCP tool; its agent loop calls `create`, `execute` and `release` on a
`BaseTool` for every tool call. This class turns those into one `tools/call` on a pooled
connection (`serving/mcp_client/http.py`) and never raises into the rollout: tool errors,
protocol errors, timeouts and an unreachable server all come back as text the model reads.

Session mapping: the notes tools remember per conversation, so every call is sent with
the trajectory's id (`agent_data.request_id`, or `create_kwargs["session_id"]` when the
dataset row sets one) in the `X-Toolrl-Session` header, plus the call's index within the
trajectory (`X-Toolrl-Call-Seq`), which pins mock-mode fault draws to the trajectory.

Config keys (the `config:` block of the tool-config YAML, all optional):
`url` (else $TOOLRL_MCP_URL, else http://127.0.0.1:8000/mcp), `token_env` (env var with
the bearer token, default TOOLRL_MCP_TOKEN), `timeout_s` (30), `max_concurrency` (64),
`mcp_name` (the server-side tool name, default the schema's name).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from typing import Any
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from serving.mcp_client.base import McpClientError, McpProtocolError
from serving.mcp_client.http import McpHttpClient, pooled_client
from serving.mcp_server.config import TOKEN_ENV

_MAX_TRACKED = 100_000
_SEQ: OrderedDict[str, int] = OrderedDict()
"""Calls made so far per trajectory, shared by every McpTool of the process (verl makes one
object per tool, but a trajectory's call index must count calls to all of them)."""


def next_call_seq(session: str) -> int:
    """The index of the next call in `session` (0, 1, 2, ...), bounded in memory."""
    seq = _SEQ.pop(session, 0)
    _SEQ[session] = seq + 1
    if len(_SEQ) > _MAX_TRACKED:
        _SEQ.popitem(last=False)
    return seq


class McpTool(BaseTool):
    """Forwards one verl tool to the MCP server; see the module docstring."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema) -> None:
        super().__init__(config, tool_schema)
        self.mcp_name = str(config.get("mcp_name") or self.name)
        self.url: str | None = config.get("url") or None
        token_env = str(config.get("token_env") or TOKEN_ENV)
        self.token: str | None = os.environ.get(token_env) or None
        self.timeout_s = float(config.get("timeout_s", 30.0))
        self.max_concurrency = int(config.get("max_concurrency", 64))
        self._instances: OrderedDict[str, str | None] = OrderedDict()

    def _client(self) -> McpHttpClient:
        return pooled_client(self.url, self.token, self.timeout_s, self.max_concurrency)

    async def create(
        self, instance_id: str | None = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid4())
        create_kwargs = kwargs.get("create_kwargs") or {}
        session = create_kwargs.get("session_id") if isinstance(create_kwargs, dict) else None
        self._instances[instance_id] = str(session) if session else None
        if len(self._instances) > _MAX_TRACKED:
            self._instances.popitem(last=False)
        return instance_id, ToolResponse()

    def _session(self, instance_id: str, kwargs: dict[str, Any]) -> str:
        session = self._instances.get(instance_id)
        if session:
            return session
        agent_data = kwargs.get("agent_data")
        request_id = getattr(agent_data, "request_id", None)
        return str(request_id) if request_id else instance_id

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        session = self._session(instance_id, kwargs)
        start = time.perf_counter()
        try:
            result = await self._client().call_tool(
                self.mcp_name, parameters, session=session, seq=next_call_seq(session)
            )
            text, is_error, transport_error = result.text, result.is_error, False
        except McpProtocolError as exc:  # e.g. unknown tool: the server's message teaches
            refusal = exc.as_result()
            text, is_error, transport_error = refusal.text, refusal.is_error, False
        except McpClientError as exc:
            text = f"Error: the tool service could not run {self.mcp_name}: {exc}"
            is_error, transport_error = True, True
        except Exception as exc:  # a rollout must never die on a tool call
            text = f"Error: calling {self.mcp_name} failed ({type(exc).__name__}); retry later."
            is_error, transport_error = True, True
        metrics = {
            "tool_error": is_error,
            "transport_error": transport_error,
            "latency_ms": (time.perf_counter() - start) * 1000.0,
        }
        return ToolResponse(text=text), 0.0, metrics

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)
