"""The front door users call: `POST /v1/chat/completions` (OpenAI shape, also streaming).

Each request runs the agent loop against the current upstream (the champion's server) and
the real MCP tools, and answers with the final assistant message; the executed tool calls
are listed under the extension field `toolrl` (the `openai` client keeps it in
`model_extra`). A request's sampling fields and `tool_choice` reach the upstream; its own
`tools` are shown to the model beside the MCP tools, and calls to them come back as
`tool_calls` for the client to run. Every request body is untrusted: size-capped, checked
field by field (`request.py`), and answered with an OpenAI-style error
(400/401/413/429/502/504), never a stack trace or a hang.
"""

from __future__ import annotations

import asyncio
import hmac
import time
import uuid

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from serving.agent import TransportError
from serving.frontdoor.replies import completion_body
from serving.frontdoor.request import ChatRequest, check_tool_names, parse_chat_request
from serving.frontdoor.stream import Episode, stream_episode
from serving.launch.switch import Switchboard
from serving.openai_request import OpenAIRequestError, json_object


class FrontDoorConfig(BaseModel):
    """How the front door runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    model_name: str = Field(default="toolrl", min_length=1)
    """The name `/v1/models` lists and responses carry."""
    api_key: SecretStr | None = None
    """Bearer key clients must send; None leaves the front door open (loopback use)."""
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    max_messages: int = Field(default=200, ge=1, le=10_000)
    max_concurrent: int = Field(default=64, ge=1, le=10_000)
    """Episodes in flight; more wait up to `queue_timeout_s`, then get 429."""
    queue_timeout_s: float = Field(default=10.0, gt=0.0, le=600.0)
    request_timeout_s: float = Field(default=300.0, gt=0.0, le=3600.0)
    """Whole-episode deadline (all turns and tool calls); 504 after it."""


def error_response(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return web.json_response(body, status=status)


class _FrontDoor:
    """The handlers, with what they share: the concurrency slots, the bearer key and the
    count of episodes in flight."""

    def __init__(self, switchboard: Switchboard, config: FrontDoorConfig) -> None:
        self.switchboard = switchboard
        self.config = config
        self.slots = asyncio.Semaphore(config.max_concurrent)
        self.key = config.api_key.get_secret_value().encode() if config.api_key else None
        self.in_flight = 0

    def authorised(self, request: web.Request) -> bool:
        if self.key is None:
            return True
        given = request.headers.get("Authorization", "")
        return given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), self.key)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        received_at = time.perf_counter()
        config = self.config
        if not self.authorised(request):
            return error_response(401, "missing or wrong bearer key", "authentication_error")
        try:
            raw = await request.read()
            chat_request = parse_chat_request(json_object(raw), config.max_messages)
        except web.HTTPRequestEntityTooLarge:
            return error_response(413, f"body larger than {config.max_body_bytes} bytes")
        except OpenAIRequestError as exc:
            return error_response(exc.status, exc.message, exc.kind)
        try:
            await asyncio.wait_for(self.slots.acquire(), config.queue_timeout_s)
        except TimeoutError:
            return error_response(429, "front door is at capacity; retry later", "rate_limit")
        return await self._answer(request, chat_request, received_at)

    async def _answer(
        self, request: web.Request, chat_request: ChatRequest, received_at: float
    ) -> web.StreamResponse:
        """Run the episode on the current upstream (a slot is held) and answer with its
        completion, streamed or whole; the slot and the upstream are released either way."""
        config = self.config
        upstream = self.switchboard.current
        upstream.enter()
        self.in_flight += 1
        try:
            try:
                server_tools = {t["function"]["name"] for t in await upstream.agent.tool_schemas()}
                check_tool_names(chat_request, server_tools)
            except OpenAIRequestError as exc:
                return error_response(exc.status, exc.message, exc.kind)
            except TransportError as exc:
                return error_response(502, f"tool server unreachable: {exc}", "upstream_error")
            episode = Episode(
                upstream.agent,
                chat_request,
                session=f"frontdoor-{uuid.uuid4().hex[:16]}",
                deadline_s=config.request_timeout_s,
                received_at=received_at,
            )
            if chat_request.stream:
                return await stream_episode(request, episode, config.model_name, upstream.version)
            trajectory = await episode.run()
        except TimeoutError:
            return error_response(504, "the agent did not finish in time", "timeout")
        finally:
            self.in_flight -= 1
            upstream.leave()
            self.slots.release()
        if trajectory.error is not None:
            return error_response(502, f"upstream failure: {trajectory.error}", "upstream_error")
        body = completion_body(trajectory, config.model_name, upstream.version, received_at)
        return web.json_response(body)

    async def models(self, request: web.Request) -> web.Response:
        if not self.authorised(request):
            return error_response(401, "missing or wrong bearer key", "authentication_error")
        entry = {"id": self.config.model_name, "object": "model", "owned_by": "toolrl"}
        return web.json_response({"object": "list", "data": [entry]})

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "model_version": self.switchboard.current.version,
                "in_flight": self.in_flight,
            }
        )


def build_app(switchboard: Switchboard, config: FrontDoorConfig) -> web.Application:
    """The aiohttp app; `switchboard.current` is read per request (reload-safe)."""
    door = _FrontDoor(switchboard, config)
    app = web.Application(client_max_size=config.max_body_bytes)
    app.router.add_post("/v1/chat/completions", door.chat)
    app.router.add_get("/v1/models", door.models)
    app.router.add_get("/health", door.health)
    return app
