"""The agent's model client reading `stream=true` replies from a real HTTP server on
loopback that misbehaves on purpose (a hostile stand-in for a model server): calls sent in
fragments are put back together, a stream that breaks after it began is an error and not
a silent short answer, a failure before the first piece is retried, and a server that
answers a stream request with plain JSON is still understood."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from serving.agent import ChatClient, TransportError
from serving.agent.chat import RetryPolicy
from serving.agent.stream_reply import StreamedReply

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
Handler = Callable[[web.Request], Any]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


async def _sse(request: web.Request, lines: list[str]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for line in lines:
        await response.write(line.encode())
        await asyncio.sleep(0)
    return response


def _run(handler: Handler, test: Callable[[ChatClient], Any]) -> Any:
    async def go() -> Any:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        chat = ChatClient(
            f"http://127.0.0.1:{port}/v1", "m", retry=RetryPolicy(attempts=3, backoff_s=0.01)
        )
        try:
            return await test(chat)
        finally:
            await chat.close()
            await runner.cleanup()

    return asyncio.run(go())


async def _ask(chat: ChatClient, pieces: list[str]) -> Any:
    return await chat.chat([{"role": "user", "content": "hi"}], [], on_delta=pieces.append)


def test_fragments_of_calls_and_content_are_put_back_together() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        return await _sse(
            request,
            [
                _chunk({"role": "assistant", "content": ""}),
                _chunk({"content": "Check"}),
                ": keep-alive\n\n",
                _chunk({"content": "ing."}),
                _chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "get_", "arguments": '{"loc'},
                            }
                        ]
                    }
                ),
                _chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "function": {"name": "weather", "arguments": 'ation": "Paris"}'},
                            }
                        ]
                    }
                ),
                _chunk({}, "tool_calls"),
                'data: {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}\n\n',
                "data: [DONE]\n\n",
            ],
        )

    pieces: list[str] = []
    reply = _run(handler, lambda chat: _ask(chat, pieces))
    assert pieces == ["Check", "ing."] and reply.content == "Checking."
    assert reply.tool_calls == [
        {"id": "c1", "name": "get_weather", "arguments": '{"location": "Paris"}'}
    ]
    assert (reply.prompt_tokens, reply.completion_tokens) == (9, 4)


def test_a_stream_cut_after_it_began_is_an_error_and_not_retried() -> None:
    calls = []

    async def handler(request: web.Request) -> web.StreamResponse:
        calls.append(1)
        return await _sse(request, [_chunk({"content": "Half an ans"})])  # no [DONE]

    pieces: list[str] = []
    with pytest.raises(TransportError, match=r"broke after it began|ended early"):
        _run(handler, lambda chat: _ask(chat, pieces))
    assert pieces == ["Half an ans"] and calls == [1]


def test_a_failure_before_the_first_piece_is_retried() -> None:
    calls = []

    async def handler(request: web.Request) -> web.StreamResponse:
        calls.append(1)
        if len(calls) == 1:
            return web.json_response({"error": "busy"}, status=503)
        return await _sse(request, [_chunk({"content": "ok"}), "data: [DONE]\n\n"])

    pieces: list[str] = []
    reply = _run(handler, lambda chat: _ask(chat, pieces))
    assert reply.content == "ok" and pieces == ["ok"] and len(calls) == 2


def test_a_plain_json_reply_to_a_stream_request_is_handed_over_in_one_piece() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(
            {"choices": [{"message": {"role": "assistant", "content": "whole"}}]}
        )

    pieces: list[str] = []
    reply = _run(handler, lambda chat: _ask(chat, pieces))
    assert reply.content == "whole" and pieces == ["whole"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("data: {not json", "not JSON"),
        ("data: [1, 2]", "not a JSON object"),
        ('data: {"error": {"message": "engine died"}}', "engine died"),
        ('data: {"choices": [{"delta": "text"}]}', "no delta object"),
        ('data: {"choices": [{"delta": {"content": 7}}]}', "not a string"),
        ('data: {"choices": [{"delta": {"tool_calls": {"a": 1}}}]}', "not a list"),
        ('data: {"choices": [{"delta": {"tool_calls": [{"index": 10000}]}}]}', "bad index"),
        ('data: {"choices": [{"delta": {"tool_calls": [{"index": true}]}}]}', "bad index"),
        ('data: {"choices": [{"delta": {"tool_calls": ["x"]}}]}', "not an object"),
        ('data: {"choices": [{"delta": {"tool_calls": [{"function": 3}]}}]}', "function"),
    ],
)
def test_hostile_chunks_are_errors_naming_the_server(line: str, message: str) -> None:
    with pytest.raises(TransportError, match=message) as caught:
        StreamedReply("http://model:1/v1/chat/completions").add_line(line)
    assert "http://model:1" in str(caught.value)


def test_comments_blank_lines_and_other_fields_are_skipped() -> None:
    reply = StreamedReply("u")
    for line in (": ping", "", "event: message", "id: 3", "retry: 10"):
        assert reply.add_line(line) == ""
    assert not reply.done and reply.content == []


def test_a_stream_that_ends_after_its_finish_reason_without_done_is_complete() -> None:
    """`transformers serve` closes the stream after the finish chunk, with no [DONE]."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await _sse(request, [_chunk({"content": "Hi"}), _chunk({}, "stop")])

    pieces: list[str] = []
    reply = _run(handler, lambda chat: _ask(chat, pieces))
    assert reply.content == "Hi" and pieces == ["Hi"]
