"""A small async client for OpenAI-compatible chat and text-completion endpoints.

Why not the `openai` package: the evaluation drives thousands of short episodes, and the
harness must cost under 5 ms of CPU per case; one pooled aiohttp session with plain JSON is
several times cheaper per request. Every reply is treated as untrusted input: a missing
`choices`, a non-string `content` or garbage `tool_calls` become a clear `TransportError`
or a malformed call, never a crash.

Retries: connection failures, timeouts, 429 and 502/503/504 are retried with exponential
backoff, then raised as `TransportError`. HTTP 500 is different: servers such as
`transformers serve` answer 500 when the *model* wrote a malformed tool call, and a retry
would reproduce it; it raises `BackendOutputError` at once so the loop can fall back to raw
text and the project's parser.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

from serving.agent.stream_reply import StreamedReply
from serving.agent.types import Message, TransportError
from serving.runtime.retry import retry_async

RETRY_STATUSES = frozenset({408, 429, 502, 503, 504})


class _RetryableError(Exception):
    """One try failed in a way another try may fix (a dropped connection, 429, 502-504);
    the message is the problem the final TransportError quotes."""


class BackendOutputError(TransportError):
    """HTTP 500 from the model server: usually its parser failing on the model's output."""


@dataclass(frozen=True, slots=True)
class ChatReply:
    """One model response, normalised. `tool_calls` entries are `{id, name, arguments}`
    where `arguments` is the raw JSON string or object the server sent."""

    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 4
    """Tries per request, the first included."""
    backoff_s: float = 0.25
    """First wait; doubles per retry."""
    max_backoff_s: float = 4.0


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _normalise_tool_calls(raw: Any) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    if not isinstance(raw, list):
        return calls
    for index, item in enumerate(raw[:64]):
        function = item.get("function") if isinstance(item, Mapping) else None
        if not isinstance(function, Mapping):
            calls.append({"id": f"call_{index}", "name": "", "arguments": item})
            continue
        call_id = item.get("id") if isinstance(item, Mapping) else None
        calls.append(
            {
                "id": call_id if isinstance(call_id, str) and call_id else f"call_{index}",
                "name": function.get("name") if isinstance(function.get("name"), str) else "",
                "arguments": function.get("arguments", "{}"),
            }
        )
    return calls


def parse_chat_body(body: Any) -> ChatReply:
    """The reply inside a chat-completions (or completions) body; TransportError if none."""
    if not isinstance(body, Mapping):
        raise TransportError("model server answered a non-object JSON body")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise TransportError("model server answered without choices")
    choice = choices[0]
    message = choice.get("message")
    if isinstance(message, Mapping):
        content = message.get("content")
        tool_calls = _normalise_tool_calls(message.get("tool_calls"))
    else:
        content, tool_calls = choice.get("text"), []
    usage_raw = body.get("usage")
    usage: Mapping[str, Any] = usage_raw if isinstance(usage_raw, Mapping) else {}
    return ChatReply(
        content=content if isinstance(content, str) else "",
        tool_calls=tool_calls,
        prompt_tokens=_int(usage.get("prompt_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
    )


def _parse_text(url: str, text: str) -> ChatReply:
    try:
        return parse_chat_body(json.loads(text))
    except ValueError as exc:
        raise TransportError(f"{url}: invalid JSON body ({exc})") from exc


def _retryable_refusal(url: str, status: int, text: str, retry_500: bool) -> str:
    """What went wrong with a non-200 answer, if it is worth retrying; raises if not."""
    problem = f"HTTP {status}: {text[:300]}"
    if status == 500 and not retry_500:
        raise BackendOutputError(f"{url}: {problem}")
    if status not in RETRY_STATUSES and status != 500:
        raise TransportError(f"{url}: {problem}")
    return problem


class ChatClient:
    """One pooled HTTP session to one OpenAI-compatible base URL (`.../v1`)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_connections: int = 64,
        retry: RetryPolicy | None = None,
        sampling: Mapping[str, Any] | None = None,
        completion_extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.retry = retry or RetryPolicy()
        self.sampling = dict(sampling or {})
        self.completion_extra = dict(completion_extra or {})
        """Extra fields for /completions only, e.g. vLLM's `skip_special_tokens: false` so
        that call tags registered as special tokens survive (transformers serve rejects
        unknown fields with 422, so the default is none)."""
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._max_connections = max_connections
        self._http: aiohttp.ClientSession | None = None

    async def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            connector = aiohttp.TCPConnector(limit=self._max_connections, keepalive_timeout=30)
            self._http = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, headers=self._headers
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None and not self._http.closed:
            await self._http.close()
        self._http = None

    async def _retrying(self, once: Callable[[], Awaitable[ChatReply]], url: str) -> ChatReply:
        """`once()` under the retry policy: `_RetryableError` failures are tried again with
        doubling backoff, anything else propagates; the last problem ends as TransportError."""
        return await retry_async(
            once,
            attempts=self.retry.attempts,
            first_backoff_s=self.retry.backoff_s,
            max_backoff_s=self.retry.max_backoff_s,
            what=url,
            retry_on=_RetryableError,
            error=TransportError,
            describe=str,
        )

    async def _post(self, path: str, payload: dict[str, Any], retry_500: bool) -> ChatReply:
        url = f"{self.base_url}{path}"
        data = json.dumps(payload, ensure_ascii=False)

        async def once() -> ChatReply:
            started = time.perf_counter()
            try:
                http = await self._session()
                async with http.post(url, data=data) as response:
                    status = response.status
                    text = await response.text()
            except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError) as exc:
                raise _RetryableError(f"{type(exc).__name__}: {str(exc)[:200]}") from exc
            if status == 200:
                reply = _parse_text(url, text)
                return replace(reply, latency_s=time.perf_counter() - started)
            raise _RetryableError(_retryable_refusal(url, status, text, retry_500))

        return await self._retrying(once, url)

    async def chat(
        self,
        messages: Sequence[Message],
        tools: Sequence[Message],
        retry_500: bool = True,
        overrides: Mapping[str, Any] | None = None,
        on_delta: Callable[[str], None] | None = None,
    ) -> ChatReply:
        """POST /chat/completions with `tools` (the server's parser fills `tool_calls`);
        `overrides` (a request's own sampling fields, `tool_choice`) win over the defaults.
        With `on_delta` the reply is streamed and each piece of content is handed over as it
        arrives; the returned reply is the same as without."""
        payload: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        if tools:
            payload["tools"] = list(tools)
        payload.update(self.sampling)
        payload.update(overrides or {})
        if on_delta is not None:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
            return await self._post_stream("/chat/completions", payload, retry_500, on_delta)
        return await self._post("/chat/completions", payload, retry_500)

    async def _post_stream(
        self,
        path: str,
        payload: dict[str, Any],
        retry_500: bool,
        on_delta: Callable[[str], None],
    ) -> ChatReply:
        """`_post` for a streamed reply. Retried like it until the first piece has been
        handed over; after that a break cannot be retried (the client has seen the start)
        and is a `TransportError`. A server that answers a stream request with a plain JSON
        body is accepted: its content is handed over in one piece."""
        url = f"{self.base_url}{path}"
        data = json.dumps(payload, ensure_ascii=False)

        async def once() -> ChatReply:
            started = time.perf_counter()
            reply = StreamedReply(url)
            try:
                http = await self._session()
                async with http.post(url, data=data) as response:
                    status = response.status
                    streamed = response.content_type == "text/event-stream"
                    if status != 200 or not streamed:
                        text = await response.text()
                    else:
                        async for raw in response.content:
                            piece = reply.add_line(raw.decode("utf-8"))
                            if piece:
                                on_delta(piece)
                            if reply.done:
                                break
                        if not reply.complete:
                            raise TransportError(
                                f"{url}: the stream ended early (no finish reason, no [DONE])"
                            )
            except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError, ValueError) as exc:
                if reply.content:
                    raise TransportError(f"{url}: the stream broke after it began: {exc}") from exc
                raise _RetryableError(f"{type(exc).__name__}: {str(exc)[:200]}") from exc
            latency = time.perf_counter() - started
            if status == 200 and streamed:
                return ChatReply(
                    "".join(reply.content),
                    _normalise_tool_calls(reply.tool_calls()),
                    reply.prompt_tokens,
                    reply.completion_tokens,
                    latency,
                )
            if status == 200:
                plain = _parse_text(url, text)
                if plain.content:
                    on_delta(plain.content)
                return replace(plain, latency_s=latency)
            raise _RetryableError(_retryable_refusal(url, status, text, retry_500))

        return await self._retrying(once, url)

    async def complete(self, prompt: str, overrides: Mapping[str, Any] | None = None) -> ChatReply:
        """POST /completions with an already-rendered prompt: the raw text comes back."""
        payload: dict[str, Any] = {"model": self.model, "prompt": prompt}
        payload.update(self.sampling)
        payload.update(self.completion_extra)
        payload.update(overrides or {})
        return await self._post("/completions", payload, retry_500=True)
