"""The MCP tools as TRL tool callables, one session per rollout.

TRL's `GRPOTrainer` runs a tool as a plain Python callable (`tool(**arguments)`), names it by
`__name__`, and renders its schema from the docstring. Three things differ from what the GPU
path does, and are fixed here so both paths see the same tools:

- Execution: every call goes to the MCP server (mock mode in training) through the same lean
  client the verl bridge uses, on a private event loop in a background thread, so a sync
  callable can wait for it. Errors come back as text the model reads, never as exceptions.
- Sessions: the notes tools remember per conversation. TRL builds one environment object per
  rollout from `environment_factory` and calls `reset(**row)` before generation; the
  environment takes a fresh session id there (the row's `session_id` plus a counter), so the
  rollouts of a GRPO group do not read each other's notes. Calls carry the per-session index
  (`X-Toolrl-Call-Seq`) exactly like the bridge, which pins mock-mode fault draws.
- Schemas: the prompt must show the server's own `tools/list` schemas, not a docstring
  rendering. `render_with_schemas` makes the tokenizer's `apply_chat_template` swap each
  callable for its MCP schema before rendering (TRL calls it with the callables).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from serving.mcp_client.base import McpClientError
from serving.mcp_client.http import McpHttpClient

ToolSchema = dict[str, Any]


def openai_function(tool: Mapping[str, Any]) -> ToolSchema:
    """One MCP `tools/list` entry in OpenAI function form, the shape chat templates render:
    rollouts and the diagnostics must show the model the same prompt."""
    return {
        "type": "function",
        "function": {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "parameters": tool.get("inputSchema", {"type": "object", "properties": {}}),
        },
    }


class McpToolRunner:
    """Sync facade over `McpHttpClient`: one event loop thread, one connection pool."""

    def __init__(self, url: str, timeout_s: float = 30.0, token: str | None = None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="toolrl-cpu-mcp", daemon=True
        )
        self._thread.start()
        self._client = McpHttpClient(url, token, timeout_s, max_concurrency=16)
        self._seq: dict[str, itertools.count[int]] = {}
        self._lock = threading.Lock()

    def _run(self, coro: Any) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(self.timeout_s + 5.0)
        except FutureTimeout:
            future.cancel()
            raise McpClientError(f"no answer within {self.timeout_s + 5.0:.0f}s") from None

    def list_tools(self) -> list[ToolSchema]:
        """The server's tools in OpenAI function form (what chat templates render)."""
        return [openai_function(tool) for tool in self._run(self._client.list_tools())]

    def next_seq(self, session: str) -> int:
        with self._lock:
            counter = self._seq.setdefault(session, itertools.count())
            return next(counter)

    def call(self, name: str, arguments: Mapping[str, Any], session: str) -> str:
        """One `tools/call`; the text the model reads (tool errors included)."""
        try:
            result = self._run(
                self._client.call_tool(name, arguments, session, self.next_seq(session))
            )
            return str(result.text)
        except McpClientError as exc:
            return f"Error: the tool service could not run {name}: {exc}"
        except Exception as exc:  # a rollout must never die on a tool call
            return f"Error: calling {name} failed ({type(exc).__name__}); retry later."

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self._client.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()


def _tool_function(name: str, schema: ToolSchema) -> Callable[..., str]:
    """A method `name(self, **arguments)` with a keyword-only signature from the schema.

    TRL calls `tool(**arguments)` with whatever the model wrote; unknown or missing
    arguments go to the server, whose validator answers with a message the model can act
    on (as in production), instead of a Python TypeError.
    """

    def method(self: McpToolEnvironment, **arguments: Any) -> str:
        return self.runner.call(name, arguments, self.session)

    params = schema["function"].get("parameters", {}).get("properties", {})
    method.__name__ = method.__qualname__ = name
    method.__doc__ = schema["function"].get("description", "")
    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    signature += [
        inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Any)
        for key in params
        if key.isidentifier()
    ]
    method.__signature__ = inspect.Signature(signature)  # type: ignore[attr-defined]
    return method


class McpToolEnvironment:
    """One rollout's view of the tools (TRL `environment_factory` contract: `reset` plus
    one public method per tool, added by `environment_class`)."""

    runner: McpToolRunner
    _ids = itertools.count()
    _process = uuid.uuid4().hex[:8]
    """Per-process prefix: a restarted run never reuses a session the server remembers."""

    def __init__(self) -> None:
        self.session = f"{self._process}/init-{next(self._ids)}"

    def reset(self, **row: Any) -> None:
        extra = row.get("extra_info") or {}
        base = f"row-{extra.get('index', 'x')}" if isinstance(extra, Mapping) else "row-x"
        self.session = f"{base}/{self._process}-{next(self._ids)}"


def environment_class(runner: McpToolRunner, schemas: list[ToolSchema]) -> type[McpToolEnvironment]:
    """A `McpToolEnvironment` subclass with one method per MCP tool."""
    members: dict[str, Any] = {"runner": runner}
    for schema in schemas:
        name = schema["function"]["name"]
        if not name.isidentifier() or name.startswith("_") or name == "reset":
            raise ValueError(f"MCP tool name {name!r} cannot be a Python method name")
        members[name] = _tool_function(name, schema)
    return type("McpTools", (McpToolEnvironment,), members)


def render_with_schemas(tokenizer: Any, schemas: list[ToolSchema]) -> Any:
    """Make `tokenizer.apply_chat_template` render callables as their MCP schemas.

    Idempotent; the original method stays reachable as `_toolrl_original_apply`.
    """
    by_name = {schema["function"]["name"]: schema for schema in schemas}
    original = getattr(tokenizer, "_toolrl_original_apply", tokenizer.apply_chat_template)

    def apply_chat_template(*args: Any, **kwargs: Any) -> Any:
        tools = kwargs.get("tools")
        if tools:
            kwargs["tools"] = [
                by_name.get(getattr(tool, "__name__", ""), tool) if callable(tool) else tool
                for tool in tools
            ]
        return original(*args, **kwargs)

    tokenizer._toolrl_original_apply = original
    tokenizer.apply_chat_template = apply_chat_template
    return tokenizer
