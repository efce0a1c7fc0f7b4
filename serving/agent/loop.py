"""The one episode runner: the front door, the evaluation harness, the quick eval and the
CPU GRPO rollouts all run this loop.

One episode: ask the model (a `ModelBackend`: a served model over HTTP, or the in-process
engine) with the conversation and the MCP server's tools; take the calls the server parsed,
or parse the text with the project's parser (`serving.toolcalls`); execute every call on the
MCP server (the calls of one turn concurrently); append the results as tool messages; repeat
until the model answers without calling, the turn limit is reached, or an in-process turn
hits its token limit. Tool errors go back to the model as tool messages; transport failures
are retried, then end the episode with `error` set. Scoring is the caller's: the evaluation
metrics (`training.evaluation.scoring`) and the reward read the returned `Trajectory`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from serving.agent.backends import EpisodeContext, ModelBackend
from serving.agent.types import (
    AgentEvent,
    EpisodeOptions,
    Message,
    ToolCall,
    ToolChoice,
    ToolExecutor,
    Trajectory,
    TransportError,
    Turn,
)
from serving.mcp_client.base import McpProtocolError
from serving.renderer import openai_tools
from serving.runtime.retry import retry_async
from serving.toolcalls import parse_tool_calls

#: Parser error kinds after which a call is not executed (its structure is broken, so what
#: the model meant is unknown). Unknown tools and schema violations ARE executed: the tool
#: server's own error message tells the model what to fix.
NOT_EXECUTED = frozenset(
    {
        "bad_json",
        "bad_structure",
        "unclosed_tag",
        "stray_closing_tag",
        "stray_attribute",
        "garbage_in_name",
        "wrong_format",
        "bare_call",
    }
)
logger = logging.getLogger(__name__)
_CALL_MARKERS = ("<tool_call", "<function=")
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


class AgentConfig(BaseModel):
    """How one episode runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    call_format: Literal["hermes", "qwen3_coder", "auto"] = "auto"
    """How calls in raw text are parsed (`serving.toolcalls`)."""
    max_turns: int = Field(default=8, ge=1, le=64)
    """Model responses per episode; an episode still calling tools after this stops."""
    tool_concurrency: int = Field(default=8, ge=1, le=256)
    """Calls of one turn executed at once."""
    tool_attempts: int = Field(default=3, ge=1, le=10)
    """Tries per tool call on transport failure (tool errors are not retried)."""
    tool_backoff_s: float = Field(default=0.2, ge=0.0, le=30.0)
    """First wait between tool-call tries; doubles per retry."""


def final_text(content: str) -> str:
    """The answer a user sees: reasoning blocks removed, whitespace trimmed."""
    if "</think>" in content:
        content = _THINK.sub("", content)
        content = content.rsplit("</think>", 1)[-1]
    return content.strip()


class Agent:
    """The loop bound to one model backend and one tool server."""

    def __init__(
        self,
        backend: ModelBackend,
        tools: ToolExecutor,
        config: AgentConfig | None = None,
    ) -> None:
        self.backend = backend
        self.tools = tools
        self.config = config or AgentConfig()
        self._schemas: list[Message] | None = None
        self._lock = asyncio.Lock()

    async def tool_schemas(self) -> list[Message]:
        """The server's tools in OpenAI form, listed once (retried like any transport)."""
        async with self._lock:
            if self._schemas is None:
                try:
                    listed = await self._retry(self.tools.list_tools, "tools/list")
                except McpProtocolError as refusal:  # no tools to offer: the episode can't run
                    raise TransportError(f"MCP tools/list refused: {refusal}") from refusal
                self._schemas = openai_tools(listed)
            return self._schemas

    async def _retry(self, fn: Any, what: str, *args: Any) -> Any:
        """Any client's transport error is retried (tool errors come back as results),
        then reported as a `TransportError` that ends the episode. A server's refusal
        (`McpProtocolError`) is an answer, not a failure: it is raised as it came, untried."""
        return await retry_async(
            fn,
            *args,
            attempts=self.config.tool_attempts,
            first_backoff_s=self.config.tool_backoff_s,
            what=f"MCP {what}",
            retry_on=_not_a_refusal,
            error=TransportError,
        )

    def _parse_raw(self, turn: Turn) -> None:
        text = turn.content
        if not any(marker in text for marker in _CALL_MARKERS):
            return
        parsed = parse_tool_calls(text, self.config.call_format)
        turn.error_kinds = [e.kind.value for e in parsed.errors if e.call_index is None]
        turn.calls = [
            ToolCall(
                f"call_{i}",
                call.name,
                dict(call.arguments),
                tuple(e.kind.value for e in call.errors),
            )
            for i, call in enumerate(parsed.calls)
        ]
        if turn.calls:
            cut = min(text.find(m) for m in _CALL_MARKERS if m in text)
            turn.content = text[:cut].rstrip()

    async def _execute(self, call: ToolCall, session: str, seq: int) -> None:
        if not call.name or NOT_EXECUTED.intersection(call.error_kinds):
            kinds = ", ".join(call.error_kinds) or "malformed"
            call.result = f"Error: the tool call could not be parsed ({kinds}); not executed."
            call.result_is_error = True
            return
        try:
            reply = await self._retry(
                self.tools.call_tool,
                f"tools/call {call.name}",
                call.name,
                call.arguments,
                session,
                seq,
            )
        except McpProtocolError as refusal:  # e.g. a tool the model made up: it reads why
            reply = refusal.as_result()
        call.result, call.result_is_error = str(reply.text), bool(reply.is_error)

    async def run(
        self,
        messages: Sequence[Message],
        session: str = "agent",
        options: EpisodeOptions | None = None,
    ) -> Trajectory:
        """Run one episode from `messages` (system + user ...). Never raises on transport
        failure: the trajectory comes back with `stop="error"` and the reason.

        `options` carries a request's own choices: sampling fields for every model call,
        `tool_choice` for the first (later turns are `auto`, or every call would be forced),
        and the client's tools: a turn that calls one of them runs its MCP calls here and
        then pauses the episode, handing the client's calls back (`stop="client_tools"`)."""
        options = options or EpisodeOptions()
        started = time.perf_counter()
        trajectory = Trajectory(messages=[dict(m) for m in messages])
        history = trajectory.messages
        context = EpisodeContext(history, [])
        seq = 0
        limit = asyncio.Semaphore(self.config.tool_concurrency)

        async def bounded(call: ToolCall, index: int) -> None:
            async with limit:
                await self._execute(call, session, index)

        def emit(event: AgentEvent) -> None:
            if options.on_event is not None:
                options.on_event(event)

        try:
            schemas = await self.tool_schemas()
            if options.tool_choice == "none":
                schemas = []
            elif options.client_tools:
                schemas = [*options.client_tools, *schemas]
            context.tools = schemas
            for index in range(self.config.max_turns):
                overrides = dict(options.sampling)
                if index == 0 and options.tool_choice != "auto":
                    overrides["tool_choice"] = upstream_tool_choice(options.tool_choice)
                turn = await self.backend.respond(context, overrides, options.on_text)
                if not turn.calls and options.tool_choice != "none":
                    self._parse_raw(turn)
                if options.tool_choice == "none":
                    turn.calls = []  # told to answer without tools: nothing is executed
                trajectory.turns.append(turn)
                if turn.finish == "length":
                    trajectory.final_answer = final_text(turn.content)
                    trajectory.stop = "length"  # a cut turn: its calls may be cut too
                    break
                if not turn.calls:
                    trajectory.final_answer = final_text(turn.content)
                    history.append({"role": "assistant", "content": turn.content})
                    break
                history.append(_assistant_message(turn))
                mine = [c for c in turn.calls if c.name not in options.client_tool_names]
                for call in mine:
                    emit(call_event("tool_call", call))
                calls_started = time.perf_counter()
                await asyncio.gather(*(bounded(c, seq + i) for i, c in enumerate(mine)))
                trajectory.tools_s += time.perf_counter() - calls_started
                seq += len(mine)
                for call in mine:
                    emit(call_event("tool_result", call))
                if len(mine) < len(turn.calls):
                    trajectory.client_calls = [
                        c for c in turn.calls if c.name in options.client_tool_names
                    ]
                    trajectory.final_answer = final_text(turn.content)
                    trajectory.stop = "client_tools"
                    break
                history.extend(
                    {"role": "tool", "tool_call_id": c.id, "name": c.name, "content": c.result}
                    for c in mine
                )
            else:
                trajectory.stop = "max_turns"
        except TransportError as exc:
            trajectory.stop, trajectory.error = "error", str(exc)
        except Exception as exc:  # a bug must fail this episode, not a 5,000-case run
            logger.exception("agent episode %s failed", session)
            trajectory.stop = "error"
            trajectory.error = f"internal error: {type(exc).__name__}: {str(exc)[:200]}"
        trajectory.prompt_ids = context.prompt_ids
        trajectory.latency_s = time.perf_counter() - started
        return trajectory


def _not_a_refusal(exc: BaseException) -> bool:
    """Worth another try: anything but the server's own JSON-RPC refusal."""
    return not isinstance(exc, McpProtocolError)


def _kinds(errors: Sequence[Any]) -> tuple[str, ...]:
    return tuple(str(error.kind.value) for error in errors)


def call_event(kind: Literal["tool_call", "tool_result"], call: ToolCall) -> AgentEvent:
    """A server-side MCP call as it starts (name, arguments) or ends (result, error flag)."""
    event: AgentEvent = {"type": kind, "id": call.id, "name": call.name}
    if kind == "tool_call":
        event["arguments"] = call.arguments
    else:
        event["is_error"] = call.result_is_error
        event["result"] = call.result[:2000]
    return event


def upstream_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """OpenAI's wire form: the three keywords as strings, a name as a function object."""
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _assistant_message(turn: Turn) -> Message:
    return {
        "role": "assistant",
        "content": turn.content,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name or "invalid_call",
                    "arguments": json.dumps(call.arguments, ensure_ascii=False),
                },
            }
            for call in turn.calls
        ],
    }
