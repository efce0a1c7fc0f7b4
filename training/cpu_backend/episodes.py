"""Episodes on the in-process engine: the one agent loop (`serving.agent`) on the model being
trained, for the GRPO rollouts and the quick eval.

Both used to run loops of their own (TRL's tool loop for rollouts, a hand-built transcript
for the quick eval). Now a rollout and an evaluation episode are the same thing as a served
request: render with the model's chat template, generate, parse with the project's parser,
call the MCP tools, continue. The only difference from serving is the backend: the engine
runs in this process on the trainer's model (token in, token out), so the sampled tokens
are exactly what the loss is computed on.

The engine steps in the calling thread (the trainer's main thread, whose OpenMP pool
torch's kernels are fast on: `EngineWorker`'s docstring has the measurement); the episodes
run on an event loop in a helper thread, so tool calls overlap with generation and every
episode waiting for a model turn joins the same continuous batch.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from serving.agent import Agent, AgentConfig, EngineBackend, Trajectory
from serving.mcp_client.http import McpHttpClient
from serving.renderer import ChatRenderer

STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")


def stop_ids(tokenizer: Any) -> frozenset[int]:
    """The end-of-turn tokens generation stops at (the ones the tokenizer has)."""
    found = set()
    for token in STOP_TOKENS:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            found.add(token_id)
    if tokenizer.eos_token_id is not None:
        found.add(int(tokenizer.eos_token_id))
    return frozenset(found)


def cpu_renderer(tokenizer: Any, enable_thinking: bool) -> ChatRenderer:
    """The renderer training uses: the model's template, or TRL's prefix-preserving variant
    of it where one exists (Qwen3's own template renders earlier assistant turns without
    their think block, so the prompt of turn 2 would not start with turn 1's tokens)."""
    from trl.chat_template_utils import get_training_chat_template

    return ChatRenderer(
        tokenizer, {"enable_thinking": enable_thinking}, get_training_chat_template(tokenizer)
    )


@dataclass(frozen=True)
class EpisodeSettings:
    """How the episodes of one batch are generated."""

    max_turns: int
    max_tokens: int
    """Tokens per model turn."""
    temperature: float = 0.0
    top_p: float = 1.0
    completion_budget: int | None = None
    """Tokens after the prompt for the whole episode (GRPO's `max_completion_length`)."""
    max_rows: int = 16
    """Episodes decoded together."""
    call_format: str = "hermes"


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to run: its prompt messages and its tool session (notes, fault draws)."""

    messages: Sequence[Mapping[str, Any]]
    session: str


@contextmanager
def engine_backend(
    model: Any,
    renderer: ChatRenderer,
    settings: EpisodeSettings,
    threads: int,
    own_thread: bool = True,
) -> Iterator[EngineBackend]:
    """An `EngineBackend` over `model` for the duration of the block (the worker stops at
    the end; the model is back in its previous train/eval mode). `model` may also be a ready
    worker (anything with `generate_async` and `close`), which is used as is. With
    `own_thread=False` nothing steps the engine until someone calls the worker's `run_here`
    (`backend.worker`)."""
    from serving.engine.engine import Engine
    from serving.engine.worker import EngineWorker

    is_worker = hasattr(model, "generate_async")
    was_training = bool(getattr(model, "training", False))
    if not is_worker:
        model.eval()
    worker = (
        model
        if is_worker
        else EngineWorker(Engine(model, max_rows=settings.max_rows), threads, own_thread=own_thread)
    )
    try:
        yield EngineBackend(
            worker,
            renderer,
            stop_ids(renderer.tokenizer),
            max_tokens=settings.max_tokens,
            temperature=settings.temperature,
            top_p=settings.top_p,
            completion_budget=settings.completion_budget,
        )
    finally:
        worker.close()
        if not is_worker:
            model.train(was_training)


async def _run_all(
    backend: EngineBackend,
    mcp_url: str,
    mcp_token: str | None,
    jobs: Sequence[EpisodeJob],
    settings: EpisodeSettings,
    timeout_s: float,
) -> list[Trajectory]:
    tools = McpHttpClient(mcp_url, mcp_token, timeout_s, max_concurrency=16)
    config = AgentConfig(max_turns=settings.max_turns, call_format=settings.call_format)
    agent = Agent(backend, tools, config)
    try:
        return list(
            await asyncio.gather(
                *(agent.run([dict(m) for m in job.messages], session=job.session) for job in jobs)
            )
        )
    finally:
        await tools.close()


def run_episodes(
    model: Any,
    renderer: ChatRenderer,
    mcp_url: str,
    jobs: Sequence[EpisodeJob],
    settings: EpisodeSettings,
    threads: int,
    mcp_token: str | None = None,
    tool_timeout_s: float = 30.0,
) -> list[Trajectory]:
    """Every job through the agent loop on the in-process engine; trajectories in job
    order. An episode that fails (a tool server down after retries) comes back with
    `stop="error"`, never as an exception."""
    if not jobs:
        return []
    if hasattr(model, "generate_async"):  # a ready worker steps itself
        with engine_backend(model, renderer, settings, threads) as backend:
            return asyncio.run(
                _run_all(backend, mcp_url, mcp_token, jobs, settings, tool_timeout_s)
            )
    with engine_backend(model, renderer, settings, threads, own_thread=False) as backend:
        outcome: list[list[Trajectory]] = []
        failure: list[BaseException] = []

        def run_loop() -> None:
            try:
                outcome.append(
                    asyncio.run(
                        _run_all(backend, mcp_url, mcp_token, jobs, settings, tool_timeout_s)
                    )
                )
            except BaseException as exc:  # handed to the calling thread, raised there
                failure.append(exc)
            finally:
                backend.worker.close()  # ends `run_here` below

        # in a copy of this thread's context: a new thread starts with an empty one, and the
        # loop's parser judges calls by the registry installed here (`using_registry`: a pack
        # dataset's tools; without it every call to a tool outside the built-in catalog read
        # as `unknown_function`)
        context = contextvars.copy_context()
        loop = threading.Thread(
            target=context.run, args=(run_loop,), name="toolrl-episodes", daemon=True
        )
        loop.start()
        backend.worker.run_here()
        loop.join()
    if failure:
        raise failure[0]
    return outcome[0]


def list_tools(mcp_url: str, mcp_token: str | None = None, timeout_s: float = 30.0) -> list[Any]:
    """The MCP server's tools in OpenAI function form (what the prompts render)."""
    from serving.renderer import openai_tools

    async def listed() -> list[dict[str, Any]]:
        client = McpHttpClient(mcp_url, mcp_token, timeout_s)
        try:
            return await client.list_tools()
        finally:
            await client.close()

    return openai_tools(asyncio.run(listed()))
