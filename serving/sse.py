"""OpenAI's chat-completion chunks as server-sent events, for every stream this project serves.

The front door and the CPU engine server both stream `chat.completion.chunk` objects ending
in `data: [DONE]`; one writer keeps the two byte-for-byte alike and gives both the same rule
for a departed client: a write to a closing transport raises `ClientGoneError`, which the
caller turns into cancelled work instead of an exception in the log.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import Any

from aiohttp import web

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
"""`X-Accel-Buffering: no` keeps nginx-style proxies from holding chunks back."""


class ClientGoneError(Exception):
    """The client closed the connection; whatever feeds the stream should stop."""


class ChunkWriter:
    """Server-sent events in OpenAI's chunk format, on one prepared response."""

    def __init__(self, http: web.Request, response: web.StreamResponse, model: str) -> None:
        self.http, self.response, self.model = http, response, model
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())

    @classmethod
    async def open(cls, http: web.Request, model: str) -> ChunkWriter:
        """Send the SSE headers; from here on errors travel as events, not status codes."""
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(http)
        return cls(http, response, model)

    def client_gone(self) -> bool:
        transport = self.http.transport
        return transport is None or transport.is_closing()

    async def data(self, payload: dict[str, Any] | str) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
        await self.write(f"data: {text}\n\n")

    async def write(self, text: str) -> None:
        if self.client_gone():
            raise ClientGoneError
        try:
            await self.response.write(text.encode("utf-8"))
        except (ConnectionResetError, ConnectionError) as exc:
            raise ClientGoneError from exc

    async def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> None:
        await self.data(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": choices,
                **extra,
            }
        )

    async def delta(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
        await self.chunk([{"index": 0, "delta": delta, "finish_reason": finish}], **extra)

    async def error(self, status: int, message: str, kind: str) -> None:
        """An error event (what the OpenAI SDKs raise as `APIError`); `done()` should follow."""
        await self.data({"error": {"message": message, "type": kind, "code": status}})

    async def done(self) -> None:
        await self.data("[DONE]")
        with contextlib.suppress(ConnectionError):
            await self.response.write_eof()
