"""The front door users call: `POST /v1/chat/completions` (OpenAI shape, non-streaming).

Each request runs the agent loop against the current upstream (the champion's server) and
the real MCP tools, and answers with the final assistant message; the executed tool calls
are listed under the extension field `toolrl` (the `openai` client keeps it in
`model_extra`). Every request body is untrusted: size-capped, schema-checked, and answered
with an OpenAI-style error (400/401/413/429/502/504), never a stack trace or a hang.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from serving.agent import Trajectory
from serving.launch.switch import Switchboard

ROLES = frozenset({"system", "user", "assistant", "tool"})


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


class RequestError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def error_response(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return web.json_response(body, status=status)


def _content(value: Any, index: int) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list):  # OpenAI content parts: only text is supported
        parts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise RequestError(400, f"messages[{index}]: only text content is supported")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise RequestError(400, f"messages[{index}].content must be a string")


def _tool_calls(calls: list[Any], index: int) -> list[dict[str, Any]]:
    """Earlier assistant tool calls, re-shaped to exactly the OpenAI fields."""
    clean = []
    for call in calls[:64]:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RequestError(400, f"messages[{index}].tool_calls: each needs function.name")
        arguments = function.get("arguments", "{}")
        clean.append(
            {
                "id": str(call.get("id", ""))[:200],
                "type": "function",
                "function": {
                    "name": function["name"][:200],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
    return clean


def parse_messages(body: Any, max_messages: int) -> list[dict[str, Any]]:
    """Validate a chat request body; RequestError(400) naming the first problem."""
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    if body.get("stream"):
        raise RequestError(400, "stream=true is not supported by the front door")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list")
    if len(messages) > max_messages:
        raise RequestError(400, f"at most {max_messages} messages")
    clean: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise RequestError(400, f"messages[{i}] needs a role in {sorted(ROLES)}")
        item: dict[str, Any] = {
            "role": message["role"],
            "content": _content(message.get("content"), i),
        }
        if message["role"] == "tool":
            item["tool_call_id"] = str(message.get("tool_call_id", ""))[:200]
        if message["role"] == "assistant" and isinstance(message.get("tool_calls"), list):
            item["tool_calls"] = _tool_calls(message["tool_calls"], i)
        clean.append(item)
    if clean[-1]["role"] not in ("user", "tool"):
        raise RequestError(400, "the last message must be from the user (or a tool)")
    return clean


def completion_body(trajectory: Trajectory, model: str, version: str) -> dict[str, Any]:
    finish = "length" if trajectory.stop == "max_turns" else "stop"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": trajectory.final_answer},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": trajectory.prompt_tokens,
            "completion_tokens": trajectory.completion_tokens,
            "total_tokens": trajectory.prompt_tokens + trajectory.completion_tokens,
        },
        "toolrl": {
            "model_version": version,
            "turns": len(trajectory.turns),
            "stop": trajectory.stop,
            "tool_calls": [
                {
                    "name": c.name,
                    "arguments": c.arguments,
                    "is_error": c.result_is_error,
                    "result": (c.result or "")[:2000],
                }
                for c in trajectory.calls
            ],
        },
    }


def build_app(switchboard: Switchboard, config: FrontDoorConfig) -> web.Application:
    """The aiohttp app; `switchboard.current` is read per request (reload-safe)."""
    slots = asyncio.Semaphore(config.max_concurrent)
    key = config.api_key.get_secret_value().encode() if config.api_key else None

    def authorised(request: web.Request) -> bool:
        if key is None:
            return True
        given = request.headers.get("Authorization", "")
        return given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), key)

    async def chat(request: web.Request) -> web.Response:
        if not authorised(request):
            return error_response(401, "missing or wrong bearer key", "authentication_error")
        try:
            raw = await request.read()
            body = json.loads(raw)
            messages = parse_messages(body, config.max_messages)
        except web.HTTPRequestEntityTooLarge:
            return error_response(413, f"body larger than {config.max_body_bytes} bytes")
        except (ValueError, RecursionError):
            return error_response(400, "request body is not valid JSON")
        except RequestError as exc:
            return error_response(exc.status, exc.message, exc.kind)
        try:
            await asyncio.wait_for(slots.acquire(), config.queue_timeout_s)
        except TimeoutError:
            return error_response(429, "front door is at capacity; retry later", "rate_limit")
        upstream = switchboard.current
        upstream.enter()
        try:
            session = f"frontdoor-{uuid.uuid4().hex[:16]}"
            trajectory = await asyncio.wait_for(
                upstream.agent.run(messages, session=session), config.request_timeout_s
            )
        except TimeoutError:
            return error_response(504, "the agent did not finish in time", "timeout")
        finally:
            upstream.leave()
            slots.release()
        if trajectory.error is not None:
            return error_response(502, f"upstream failure: {trajectory.error}", "upstream_error")
        return web.json_response(completion_body(trajectory, config.model_name, upstream.version))

    async def models(request: web.Request) -> web.Response:
        if not authorised(request):
            return error_response(401, "missing or wrong bearer key", "authentication_error")
        entry = {"id": config.model_name, "object": "model", "owned_by": "toolrl"}
        return web.json_response({"object": "list", "data": [entry]})

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "model_version": switchboard.current.version})

    app = web.Application(client_max_size=config.max_body_bytes)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app
