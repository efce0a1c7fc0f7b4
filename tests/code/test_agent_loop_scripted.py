"""The agent loop against a scripted OpenAI-compatible server on loopback and an in-process
tool executor: concurrency of parallel calls, tool errors, transport retries, turn limit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from serving.agent import Agent, AgentConfig, ChatClient, EndpointBackend, RetryPolicy
from serving.mcp_client.base import McpProtocolError
from training.evaluation.scripted import Scripted, serve_in_thread

Message = dict[str, Any]
TOOLS = [{"name": "slow", "description": "d", "inputSchema": {"type": "object"}}]


@dataclass
class Reply:
    text: str
    is_error: bool = False


class FakeTools:
    """A fake tool executor. `refuse`: its server answers every call with a JSON-RPC error,
    as the real server does an unknown tool (`test_eval_scripted_server.py` has that one on
    loopback); `refuse_listing`: the same for `tools/list`."""

    def __init__(
        self,
        delay: float = 0.0,
        fail_times: int = 0,
        error: bool = False,
        refuse: bool = False,
        refuse_listing: bool = False,
    ) -> None:
        self.delay, self.fail_times, self.error = delay, fail_times, error
        self.refuse, self.refuse_listing, self.listings = refuse, refuse_listing, 0
        self.calls: list[tuple[str, dict[str, Any], str | None]] = []
        self.spans: list[tuple[float, float]] = []  # (start, end) of each call's work

    async def list_tools(self) -> list[dict[str, Any]]:
        self.listings += 1
        if self.refuse_listing:
            raise McpProtocolError(-32603, "listing is broken")
        return TOOLS

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        session: str | None = None,
        seq: int | None = None,
    ) -> Reply:
        self.calls.append((name, dict(arguments or {}), session))
        if self.refuse:
            raise McpProtocolError(-32602, f"Unknown tool {name!r}; available tools: slow")
        if self.fail_times:
            self.fail_times -= 1
            raise ConnectionError("tool server down")
        began = time.monotonic()
        # later calls finish first, so in-order results cannot come from completion order
        await asyncio.sleep(self.delay / (1 + int((arguments or {}).get("i", 0))))
        self.spans.append((began, time.monotonic()))
        if self.error:
            return Reply("Error: city not found", True)
        return Reply(f"result of {arguments}")


def calls_then_answer(n_calls: int) -> Any:
    def reply(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        if not any(m["role"] == "tool" for m in messages):
            return Scripted(calls=[("slow", {"i": i}) for i in range(n_calls)])
        return Scripted(content="<think>hmm</think> final answer")

    return reply


def run(script: Any, tools: FakeTools, **config: Any) -> Any:
    with serve_in_thread(script) as url:
        client = ChatClient(url, "m", retry=RetryPolicy(attempts=2, backoff_s=0.01))
        agent = Agent(EndpointBackend(client), tools, AgentConfig(tool_backoff_s=0.01, **config))

        async def go() -> Any:
            try:
                return await agent.run([{"role": "user", "content": "q"}], session="s1")
            finally:
                await client.close()

        return asyncio.run(go())


def test_scripted_parallel_calls_run_concurrently_and_results_come_back_in_order() -> None:
    tools = FakeTools(delay=0.3)
    trajectory = run(calls_then_answer(4), tools)
    starts, ends = [s for s, _ in tools.spans], [e for _, e in tools.spans]
    assert len(tools.spans) == 4 and max(starts) < min(ends)  # all four were in flight at once
    assert trajectory.stop == "answer" and trajectory.final_answer == "final answer"
    tool_messages = [m for m in trajectory.messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == [f"result of {{'i': {i}}}" for i in range(4)]
    assert {session for _, _, session in tools.calls} == {"s1"}


def test_scripted_tool_errors_go_back_to_the_model_as_tool_messages() -> None:
    trajectory = run(calls_then_answer(1), FakeTools(error=True))
    assert trajectory.error is None
    assert trajectory.calls[0].result_is_error
    assert trajectory.messages[-2] == {
        "role": "tool",
        "tool_call_id": trajectory.calls[0].id,
        "name": "slow",
        "content": "Error: city not found",
    }


def test_scripted_tool_transport_failure_is_retried_then_reported() -> None:
    recovered = run(calls_then_answer(1), FakeTools(fail_times=2), tool_attempts=3)
    assert recovered.stop == "answer"
    failed = run(calls_then_answer(1), FakeTools(fail_times=5), tool_attempts=2)
    assert failed.stop == "error"
    assert "ConnectionError" in (failed.error or "")


def test_a_refused_call_is_a_tool_error_the_model_reads_tried_once() -> None:
    tools = FakeTools(refuse=True)
    trajectory = run(calls_then_answer(1), tools, tool_attempts=3)
    assert trajectory.stop == "answer" and trajectory.error is None
    assert len(tools.calls) == 1  # a refusal is an answer: not tried again
    call = trajectory.turns[0].calls[0]
    assert call.result_is_error
    assert call.result == "Error: Unknown tool 'slow'; available tools: slow"


def test_a_refused_tool_listing_ends_the_episode_as_a_transport_failure() -> None:
    tools = FakeTools(refuse_listing=True)
    trajectory = run(calls_then_answer(1), tools, tool_attempts=3)
    assert trajectory.stop == "error" and tools.listings == 1
    assert "tools/list refused" in (trajectory.error or "")


def test_scripted_turn_limit_stops_a_model_that_never_answers() -> None:
    def forever(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        return Scripted(calls=[("slow", {})])

    trajectory = run(forever, FakeTools(), max_turns=3)
    assert trajectory.stop == "max_turns" and len(trajectory.turns) == 3


def test_scripted_calls_in_content_are_parsed_by_the_project_parser() -> None:
    """A server without a tool parser returns calls as text: the loop parses them with
    `serving.toolcalls` (hermes), keeps the prose before the first call as the content and
    reports what the parser found wrong with the turn."""

    def text_calls(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        if any(m["role"] == "tool" for m in messages):
            return Scripted(content="done")
        return Scripted(
            content='Let me check.<tool_call>\n{"name": "slow", "arguments": {"x": 1}}\n'
            "</tool_call> and the answer is 3"
        )

    tools = FakeTools()
    with serve_in_thread(text_calls) as url:
        client = ChatClient(url, "m")
        agent = Agent(EndpointBackend(client), tools)
        trajectory = asyncio.run(agent.run([{"role": "user", "content": "q"}]))
    assert tools.calls[0][:2] == ("slow", {"x": 1})
    assert trajectory.turns[0].content == "Let me check."
    assert trajectory.turns[0].error_kinds == ["text_after_call"]
    # `slow` is not in the built-in catalog: named as such, and still executed
    assert trajectory.turns[0].calls[0].error_kinds == ("unknown_function",)
    assert trajectory.final_answer == "done"


def test_raw_mode_requires_a_renderer() -> None:
    with pytest.raises(ValueError, match="raw mode"):
        EndpointBackend(ChatClient("http://127.0.0.1:9/v1", "m"), mode="raw")
