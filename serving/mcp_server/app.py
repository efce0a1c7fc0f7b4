"""The ASGI application: MCP at `config.path`, `/healthz`, `/metrics`.

The MCP endpoint is the official SDK's low-level `Server` behind its streamable-HTTP
session manager in stateless JSON mode: every POST carries one JSON-RPC message and gets
one JSON answer, with no per-session server task, no SSE framing and no session table.
That is what lets several processes serve one port (no session affinity needed) and keeps
the per-call CPU low; it gives up server-to-client requests and resumable streams, which
no tool here needs. Conversation state (notes) is keyed by our session header instead.

Routing, auth and size limits are a thin raw-ASGI layer in front (no framework routing on
the hot path).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from serving.mcp_server.calls import CallRunner
from serving.mcp_server.config import SEQ_HEADER, SESSION_HEADER, SESSION_META_KEY, ServerConfig
from serving.mcp_server.live import LiveTools
from serving.mcp_server.metrics import Metrics
from serving.mcp_server.protocol import tool_list, unknown_tool
from serving.mcp_server.replay import ReplaySet
from serving.tools import ToolCatalog
from serving.tools.base import NotesStore

logger = logging.getLogger("toolrl.mcp.app")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

SEQ_META_KEY = "toolrl/seq"
SERVER_NAME = "toolrl-tools"


def _header(ctx: ServerRequestContext[Any, Any], name: str) -> str | None:
    request = ctx.request
    headers = getattr(request, "headers", None)
    if headers is None:
        return None
    value = headers.get(name)
    return str(value) if value is not None else None


def _session_of(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> tuple[str | None, int | None]:
    """Which conversation a call belongs to, and its index in it (both optional).

    Precedence: `_meta["toolrl/session"]`, then the `X-Toolrl-Session` header, then the
    MCP session id (stateful deployments). Without any, calls share the anonymous session.
    """
    raw_meta: Any = params.meta
    if hasattr(raw_meta, "model_dump"):
        raw_meta = raw_meta.model_dump(by_alias=True)
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    session = meta.get(SESSION_META_KEY) or _header(ctx, SESSION_HEADER)
    if not session:
        session = _header(ctx, "mcp-session-id")
    raw_seq = meta.get(SEQ_META_KEY)
    if raw_seq is None:
        raw_seq = _header(ctx, SEQ_HEADER)
    seq: int | None = None
    if raw_seq is not None:
        with contextlib.suppress(TypeError, ValueError):
            seq = int(raw_seq)
    return (str(session)[:200] if session else None), seq


def build_mcp_server(runner: CallRunner) -> Server[Any]:
    """The SDK low-level server with our two handlers."""
    listed = types.ListToolsResult(tools=tool_list(runner.catalog))

    async def on_list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listed

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        unknown = unknown_tool(runner, params.name)
        if unknown is not None:
            raise MCPError(types.INVALID_PARAMS, unknown)
        session, seq = _session_of(ctx, params)
        outcome = await runner.call(params.name, params.arguments, session, seq)
        return types.CallToolResult(
            content=[types.TextContent(text=outcome.text)],
            structured_content=outcome.result,
            is_error=outcome.is_error,
        )

    schemas = {tool.name: dict(tool.parameters) for tool in runner.catalog}

    return Server(
        SERVER_NAME,
        # Without this the SDK runs the tools/list handler on every 2026-07-28 call to
        # check Mcp-Param-* headers: half of that path's CPU per call.
        get_tool_input_schema=schemas.get,
        version="1",
        instructions="Tools of the toolrl catalog. Errors come back as tool results with isError.",
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


async def _send_json(
    send: Send, status: int, payload: Any, headers: list[Any] | None = None
) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class McpApp:
    """Raw ASGI entry: lifespan, auth, size limit, routing."""

    def __init__(
        self,
        config: ServerConfig,
        catalog: ToolCatalog,
        metrics: Metrics,
        notes: NotesStore | None = None,
        replay: ReplaySet | None = None,
        live: LiveTools | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.runner = CallRunner(catalog, config, metrics, notes, replay, live)
        self.server = build_mcp_server(self.runner)
        if not config.otel_spans:
            self.server.middleware = []  # the SDK's documented opt-out
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            json_response=True,
            stateless=True,
            max_request_body_size=config.max_body_bytes,
            # Host/Origin checks guard browsers against DNS rebinding; this endpoint is
            # for programmatic clients, bound to loopback or behind an authenticated proxy.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        token = config.resolved_token()
        self._expected_auth = f"Bearer {token}".encode() if token else None
        self._stack: contextlib.AsyncExitStack | None = None
        self.ready = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            path = scope["path"]
            if path == self.config.path or path == self.config.path + "/":
                if self._authorised(scope):
                    await self.manager.handle_request(scope, receive, send)
                else:
                    await self._unauthorised(send)
            elif path == "/healthz":
                await self._health(send)
            elif path == "/metrics":
                await self._metrics(scope, send)
            else:
                await _send_json(send, 404, {"error": "not found"})
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    def _authorised(self, scope: Scope) -> bool:
        if self._expected_auth is None:
            return True
        for key, value in scope["headers"]:
            if key == b"authorization":
                return hmac.compare_digest(value, self._expected_auth)
        return False

    async def _unauthorised(self, send: Send) -> None:
        await _send_json(
            send,
            401,
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": -32001,
                    "message": "Unauthorized: missing or invalid bearer token",
                },
            },
            [(b"www-authenticate", b'Bearer realm="toolrl-mcp"')],
        )

    async def _health(self, send: Send) -> None:
        status = 200 if self.ready else 503
        await _send_json(
            send,
            status,
            {
                "status": "ok" if self.ready else "starting",
                "mode": self.config.mode,
                "tools": len(self.runner.catalog),
                "pid": os.getpid(),
                **(self.runner.replay.health() if self.runner.replay else {}),
            },
        )

    async def _metrics(self, scope: Scope, send: Send) -> None:
        if b"format=json" in scope.get("query_string", b""):
            await _send_json(send, 200, self.metrics.snapshot())
            return
        body = self.metrics.render_prometheus().encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    self._stack = contextlib.AsyncExitStack()
                    await self._stack.enter_async_context(self.manager.run())
                except Exception as exc:
                    logger.exception("MCP app failed to start")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                self.ready = True
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.ready = False
                if self._stack is not None:
                    await self._stack.aclose()
                await self.runner.aclose()
                self.runner.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
