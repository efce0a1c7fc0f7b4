"""The agent loop's contracts: what it needs injected, and the trajectory it returns.

Why Protocols: `serving` must not import `training` (the dependency runs the other way), yet
evaluation and the front door must run the *same* loop with the project's tool-call parser and
its pooled MCP client. So the loop names only shapes here; the composition roots (the `toolrl`
commands) inject `serving.toolcalls.parse_tool_calls` and the MCP client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Message = dict[str, Any]
"""One OpenAI chat message (`role`, `content`, optional `tool_calls` / `tool_call_id`)."""


class ToolReply(Protocol):
    """What a tool call returns: the text the model sees and whether it is a tool error."""

    @property
    def text(self) -> str: ...

    @property
    def is_error(self) -> bool: ...


class ToolExecutor(Protocol):
    """An MCP client: `list_tools` returns MCP tool dicts (`name`, `description`,
    `inputSchema`); `call_tool` raises only on transport failure (tool errors come back as
    `is_error`). `serving.mcp_client.http.McpHttpClient` and the stdio client have this shape."""

    async def list_tools(self) -> list[dict[str, Any]]: ...

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        session: str | None = None,
        seq: int | None = None,
    ) -> ToolReply: ...


@dataclass(slots=True)
class ToolCall:
    """One call the model made in a turn, as executed (or refused)."""

    id: str
    name: str
    arguments: dict[str, Any]
    error_kinds: tuple[str, ...] = ()
    result: str = ""
    result_is_error: bool = False


@dataclass(slots=True)
class Turn:
    """One model response: its prose, its calls, how it was obtained and what it cost."""

    content: str
    calls: list[ToolCall] = field(default_factory=list)
    error_kinds: list[str] = field(default_factory=list)
    """Turn-level format errors (e.g. text after the last call)."""
    source: Literal["tool_calls", "raw", "raw_fallback", "engine"] = "tool_calls"
    """Where calls came from: the server's parser, the raw-completion path, the fallback
    taken after the server failed on malformed output (HTTP 500), or an in-process engine
    (raw text, parsed by the project's parser)."""
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    streamed: str = ""
    """The prose of this turn already handed to `EpisodeOptions.on_text` as it arrived."""
    text: str = ""
    """The reply as the model wrote it (calls included); `content` is the prose before
    the first call."""
    token_ids: list[int] = field(default_factory=list)
    """In-process backends: the tokens the model sampled this turn, as sampled."""
    context_ids: list[int] = field(default_factory=list)
    """In-process backends: the tokens placed before this turn that the model did not
    write (the previous turn's tool results and the generation prompt)."""
    finish: Literal["stop", "length"] | None = None
    """In-process backends: `length` when the turn was cut at its token limit."""


@dataclass(slots=True)
class Trajectory:
    """The whole episode. `error` is set when a transport failure ended it (after retries);
    such an episode is reported as an error, never scored as if the model had answered."""

    messages: list[Message]
    turns: list[Turn] = field(default_factory=list)
    final_answer: str = ""
    stop: Literal["answer", "max_turns", "error", "client_tools", "length"] = "answer"
    """`client_tools`: the model called a tool the *client* supplied; the episode pauses and
    those calls (`client_calls`) go back to the client to run, OpenAI-style. `length`: the
    model's turn was cut at its token limit (in-process backends), so nothing more ran."""
    error: str | None = None
    latency_s: float = 0.0
    tools_s: float = 0.0
    """Wall time spent waiting on MCP calls (the calls of one turn overlap)."""
    client_calls: list[ToolCall] = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)
    """In-process backends: the rendered prompt's tokens."""

    @property
    def completion_ids(self) -> list[int]:
        """Every token after the prompt, in order: what GRPO trains on."""
        return [t for turn in self.turns for t in (*turn.context_ids, *turn.token_ids)]

    @property
    def model_token_mask(self) -> list[int]:
        """1 for each token of `completion_ids` the model wrote, 0 for the rest."""
        mask: list[int] = []
        for turn in self.turns:
            mask += [0] * len(turn.context_ids) + [1] * len(turn.token_ids)
        return mask

    @property
    def calls(self) -> list[ToolCall]:
        return [call for turn in self.turns for call in turn.calls]

    @property
    def model_s(self) -> float:
        """Wall time spent waiting on the model server, all turns."""
        return sum(turn.latency_s for turn in self.turns)

    @property
    def prompt_tokens(self) -> int:
        return sum(turn.prompt_tokens for turn in self.turns)

    @property
    def completion_tokens(self) -> int:
        return sum(turn.completion_tokens for turn in self.turns)


ToolChoice = Literal["auto", "none", "required"] | str
"""OpenAI `tool_choice`: auto, none (answer without tools), required (call something), or
the name of the one function the first turn must call."""

AgentEvent = dict[str, Any]
"""What an episode reports while it runs (`{"type": "tool_call" | "tool_result", ...}`), so a
streaming client can show "calling get_current_weather..." as it happens."""


@dataclass(frozen=True, slots=True)
class EpisodeOptions:
    """Per-request choices the front door passes into one episode."""

    sampling: Mapping[str, Any] = field(default_factory=dict)
    """Upstream sampling fields (temperature, top_p, max_tokens, stop, seed), sent as is."""
    tool_choice: ToolChoice = "auto"
    client_tools: Sequence[Message] = ()
    """OpenAI function schemas the client runs itself; shown to the model beside the MCP
    tools. Calls to them end the episode with `stop="client_tools"`."""
    on_event: Callable[[AgentEvent], None] | None = None
    on_text: Callable[[str], None] | None = None
    """Streams the prose of each model turn as the upstream writes it (chat mode), filtered
    so that no call, stop string or reasoning block shows (`serving/answer_stream.py`).
    Raw-mode turns and the fallback after an HTTP 500 are not streamed: their text is
    only known whole."""

    @property
    def client_tool_names(self) -> frozenset[str]:
        return frozenset(str(t["function"]["name"]) for t in self.client_tools)


class TransportError(Exception):
    """The model endpoint or the tool server could not be reached or answered garbage, after
    the configured retries. Carries what was tried, for the report."""
