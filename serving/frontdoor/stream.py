"""`stream=true`: one episode as OpenAI chat-completion chunks over server-sent events.

The stream opens with the assistant role, then carries the episode as it happens: each
model turn's prose token by token (the upstream is called with `stream=true`; the agent's
filter holds back anything that may turn into a call, a stop string or a reasoning block),
and each server-side MCP call as it starts and ends (chunks with no choices and a
`toolrl.event`, which OpenAI clients pass through as an extra field, so a UI can show
"calling get_current_weather..."). Then whatever of the answer was held back, the client's
own tool calls, the finish reason with the `toolrl` trace, the usage chunk when
`stream_options.include_usage` asks for it, and `data: [DONE]`. The content adds up to the
plain reply's answer; if the model wrote prose before a server-side call, the stream carries
that prose too (it was shown before the call was known), the plain reply only the answer.
A turn that cannot be streamed (raw mode, the fallback after an HTTP 500) arrives in one piece.

Failure never leaves a hung connection: a timeout or an upstream failure after the stream
started ends it with an `error` event (what the OpenAI SDKs raise as `APIError`) and
`[DONE]`; a client that goes away is noticed within `POLL_S` and its episode is cancelled,
which closes the episode's upstream requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from aiohttp import web

from serving.agent import Agent, AgentEvent, EpisodeOptions, Trajectory
from serving.frontdoor.replies import client_tool_calls, finish_reason, trace, usage
from serving.frontdoor.request import ChatRequest
from serving.sse import ChunkWriter, ClientGoneError

POLL_S = 0.5
"""How often a quiet stream checks that its client is still connected."""
KEEPALIVE_S = 15.0
"""An SSE comment this often keeps proxies from closing a quiet stream."""


class Episode:
    """One request's agent run, with the events it reports while running."""

    def __init__(
        self,
        agent: Agent,
        request: ChatRequest,
        session: str,
        deadline_s: float,
        received_at: float | None = None,
    ):
        self.agent, self.request, self.session, self.deadline_s = (
            agent,
            request,
            session,
            deadline_s,
        )
        self.received_at = received_at or time.perf_counter()
        """When the front door got the request (for the trace's `door_s`)."""
        self.events: asyncio.Queue[AgentEvent] = asyncio.Queue()
        self.options = EpisodeOptions(
            sampling=request.sampling,
            tool_choice=request.tool_choice,
            client_tools=request.client_tools,
            on_event=self.events.put_nowait,
            on_text=lambda text: self.events.put_nowait({"type": "content", "text": text}),
        )

    async def run(self) -> Trajectory:
        """The trajectory; TimeoutError after the deadline (the episode is cancelled)."""
        return await asyncio.wait_for(
            self.agent.run(self.request.messages, session=self.session, options=self.options),
            self.deadline_s,
        )


async def _relay_events(
    episode: Episode, task: asyncio.Future[Trajectory], out: ChunkWriter
) -> None:
    """Forward the episode's events until it ends; notice a departed client while quiet."""
    quiet_since = time.monotonic()
    while not task.done():
        getter: asyncio.Future[Any] = asyncio.ensure_future(episode.events.get())
        waiting: set[asyncio.Future[Any]] = {task, getter}
        done, _ = await asyncio.wait(waiting, timeout=POLL_S, return_when="FIRST_COMPLETED")
        if getter in done:
            await _forward(getter.result(), out)
            quiet_since = time.monotonic()
            continue
        getter.cancel()
        if out.client_gone():
            raise ClientGoneError
        if time.monotonic() - quiet_since > KEEPALIVE_S:
            await out.write(": keep-alive\n\n")
            quiet_since = time.monotonic()
    while not episode.events.empty():
        await _forward(episode.events.get_nowait(), out)


async def _forward(event: AgentEvent, out: ChunkWriter) -> None:
    """Prose as content deltas; server-side tool calls in the `toolrl` extension."""
    if event.get("type") == "content":
        await out.delta({"content": event["text"]})
    else:
        await out.chunk([], toolrl={"event": event})


def _unsent(trajectory: Trajectory) -> str:
    """The part of the answer the stream has not carried yet: all of it when the last turn
    was not streamed (raw mode, the HTTP 500 fallback), else what the filter held back."""
    answer = trajectory.final_answer
    sent = trajectory.turns[-1].streamed if trajectory.turns else ""
    if not sent:
        return answer
    return answer[len(sent) :] if answer.startswith(sent) else ""


async def _finish(
    trajectory: Trajectory, out: ChunkWriter, version: str, with_usage: bool, received_at: float
) -> None:
    if trajectory.error is not None:
        await out.error(502, f"upstream failure: {trajectory.error}", "upstream_error")
        return
    delta: dict[str, Any] = {}
    rest = _unsent(trajectory)
    if rest:
        delta["content"] = rest
    if trajectory.client_calls:
        delta["tool_calls"] = [
            {"index": i, **call} for i, call in enumerate(client_tool_calls(trajectory))
        ]
    if delta:
        await out.delta(delta)
    await out.delta({}, finish_reason(trajectory), toolrl=trace(trajectory, version, received_at))
    if with_usage:
        await out.chunk([], usage=usage(trajectory))


async def stream_episode(
    http: web.Request, episode: Episode, model: str, version: str
) -> web.StreamResponse:
    """Run `episode`, streaming it to the client; returns when the stream is closed."""
    out = await ChunkWriter.open(http, model)
    task = asyncio.ensure_future(episode.run())
    try:
        await out.delta({"role": "assistant", "content": ""})
        await _relay_events(episode, task, out)
        try:
            trajectory = task.result()
        except TimeoutError:
            await out.error(504, "the agent did not finish in time", "timeout")
        else:
            await _finish(
                trajectory, out, version, episode.request.include_usage, episode.received_at
            )
        await out.done()
    except ClientGoneError:
        pass  # nobody is listening; the finally below stops the work
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    return out.response
