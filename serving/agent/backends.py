"""Where an episode's model turns come from: a served model over HTTP, or an in-process
engine. The agent loop (`loop.py`) is the same for both; only `respond` differs.

- `EndpointBackend`: an OpenAI-compatible server (vLLM, the CPU engine server, `transformers
  serve`). `chat` mode asks `/chat/completions` and takes the server's parsed `tool_calls`;
  `raw` mode renders the prompt with the model's chat template and asks `/completions`, and
  the loop parses the text. In chat mode a server that fails on malformed output (HTTP 500)
  is asked again in raw mode when a renderer is given.
- `EngineBackend`: the packed engine in this process (`serving/engine`), token in, token
  out. The prompt is rendered once; each later turn continues the same token sequence with
  the tool results as the template frames them. The sampled tokens are kept exactly, so a
  trajectory is what GRPO trains on, and the quick eval runs through the same code.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from serving.agent.chat import BackendOutputError, ChatClient, ChatReply
from serving.agent.types import Message, ToolCall, Turn
from serving.answer_stream import AnswerStream
from serving.renderer import ChatRenderer


@dataclass
class EpisodeContext:
    """One episode as a backend sees it: the conversation so far (the loop appends to
    `messages`), the tools shown, and what an in-process backend keeps between turns."""

    messages: list[Message]
    tools: list[Message]
    prompt_ids: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    """Every token so far (prompt, turns, tool results): the next turn's input."""
    rendered: int = 0
    """How many of `messages` `ids` already holds."""
    completion_tokens: int = 0
    """Tokens after the prompt so far, tool results included (the rollout budget)."""


class ModelBackend(Protocol):
    """One model turn for an episode. Raises `TransportError` when the model cannot be
    reached; a malformed reply is returned as text, for the loop's parser to judge."""

    async def respond(
        self,
        context: EpisodeContext,
        overrides: Mapping[str, Any],
        on_text: Callable[[str], None] | None,
    ) -> Turn: ...


def structured_calls(raw_calls: list[dict[str, Any]]) -> list[ToolCall]:
    """A server's `tool_calls` ({id, name, arguments as JSON text or object}) as calls;
    unreadable arguments become a `bad_json`/`bad_structure` call that is not executed."""
    calls: list[ToolCall] = []
    for raw in raw_calls:
        arguments = raw["arguments"]
        kinds: tuple[str, ...] = ()
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                arguments, kinds = {}, ("bad_json",)
        if not isinstance(arguments, dict):
            arguments, kinds = {}, ("bad_structure",)
        if not raw["name"]:
            kinds = (*kinds, "bad_structure")
        calls.append(ToolCall(raw["id"], raw["name"], arguments, kinds))
    return calls


def _turn(reply: ChatReply, source: Literal["tool_calls", "raw", "raw_fallback"]) -> Turn:
    return Turn(
        content=reply.content,
        text=reply.content,
        calls=structured_calls(reply.tool_calls),
        source=source,
        latency_s=reply.latency_s,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
    )


@dataclass
class EndpointBackend:
    """A model behind an OpenAI-compatible base URL (see the module docstring)."""

    chat: ChatClient
    mode: Literal["chat", "raw"] = "chat"
    renderer: ChatRenderer | None = None
    """Renders raw prompts (raw mode, and the chat-mode fallback after an HTTP 500)."""

    def __post_init__(self) -> None:
        if self.mode == "raw" and self.renderer is None:
            raise ValueError("raw mode needs a prompt renderer (the model's chat template)")

    async def respond(
        self,
        context: EpisodeContext,
        overrides: Mapping[str, Any],
        on_text: Callable[[str], None] | None,
    ) -> Turn:
        text_overrides = {k: v for k, v in overrides.items() if k != "tool_choice"}
        if self.mode == "raw":
            assert self.renderer is not None
            prompt = self.renderer.text(context.messages, context.tools)
            return _turn(await self.chat.complete(prompt, text_overrides), "raw")
        prose = AnswerStream()

        def shown(piece: str) -> None:
            delta = prose.feed(piece)
            if delta and on_text is not None:
                on_text(delta)

        try:
            reply = await self.chat.chat(
                context.messages,
                context.tools,
                retry_500=self.renderer is None,
                overrides=overrides,
                on_delta=shown if on_text is not None else None,
            )
        except BackendOutputError:
            assert self.renderer is not None  # retry_500 is off only with a renderer
            prompt = self.renderer.text(context.messages, context.tools)
            return _turn(await self.chat.complete(prompt, text_overrides), "raw_fallback")
        turn = _turn(reply, "tool_calls")
        turn.streamed = prose.sent
        return turn


@dataclass
class EngineBackend:
    """The packed engine in this process, token in and token out (module docstring)."""

    worker: Any
    """A `serving.engine.worker.EngineWorker` (typed loosely: serving.engine imports torch,
    which an HTTP-only process never loads)."""
    renderer: ChatRenderer
    stop_ids: frozenset[int]
    max_tokens: int = 256
    """Tokens per model turn, unless a request's `max_tokens` says otherwise."""
    temperature: float = 0.0
    top_p: float = 1.0
    completion_budget: int | None = None
    """Tokens after the prompt for the whole episode, tool results included (GRPO's
    `max_completion_length`): a turn gets what is left, and none once it is spent."""
    timeout_s: float = 600.0

    def _next_input(self, context: EpisodeContext) -> tuple[list[int], list[int] | None]:
        """The tokens to add before this turn, and the prefix hint (first turn only)."""
        if not context.ids:
            context.prompt_ids = self.renderer.ids(context.messages, context.tools)
            context.ids = list(context.prompt_ids)
            context.rendered = len(context.messages)
            return [], self.renderer.system_prefix_ids(context.messages, context.tools)
        new = context.messages[context.rendered :]
        context.rendered = len(context.messages)
        results = [m for m in new if m.get("role") == "tool"]
        if not results or any(m.get("role") not in ("assistant", "tool") for m in new):
            raise ValueError("an in-process episode continues only with tool results")
        return self.renderer.tool_suffix_ids(results), None

    async def respond(
        self,
        context: EpisodeContext,
        overrides: Mapping[str, Any],
        on_text: Callable[[str], None] | None,
    ) -> Turn:
        from serving.engine.engine import Request, Sampling

        if overrides.get("tool_choice", "auto") != "auto":
            raise ValueError("the in-process engine backend supports tool_choice 'auto' only")
        added, hint = self._next_input(context)
        limit = int(overrides.get("max_tokens") or self.max_tokens)
        if self.completion_budget is not None:
            left = self.completion_budget - context.completion_tokens - len(added)
            limit = min(limit, left)
        if limit <= 0:  # the results (or the budget) leave no room for a turn: cut here
            return Turn(content="", source="engine", finish="length")
        turn = Turn(content="", source="engine", context_ids=added)
        sampling = Sampling(
            max_new_tokens=limit,
            temperature=float(overrides.get("temperature", self.temperature)),
            top_p=float(overrides.get("top_p", self.top_p)),
            stop_ids=self.stop_ids,
            seed=overrides.get("seed"),
        )
        request = Request([*context.ids, *added], sampling)
        started = time.perf_counter()
        await self.worker.generate_async(request, hint, self.timeout_s)
        turn.latency_s = time.perf_counter() - started
        if request.finish == "error":
            raise ValueError(request.error or "generation failed")
        context.ids += [*added, *request.tokens]
        context.completion_tokens += len(added) + len(request.tokens)
        kept = [t for t in request.tokens if t not in self.stop_ids]
        text = str(self.renderer.tokenizer.decode(kept, skip_special_tokens=True))
        turn.content = turn.text = text
        turn.token_ids = list(request.tokens)
        turn.prompt_tokens = len(context.ids) - len(request.tokens)
        turn.completion_tokens = len(request.tokens)
        turn.finish = "length" if request.finish == "length" else "stop"
        return turn
