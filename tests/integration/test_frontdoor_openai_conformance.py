"""The front door as an OpenAI endpoint that client code can rely on, called with the `openai`
SDK: streaming (chunks, tool events as they happen, usage, errors mid-stream, a client that
leaves), the request fields (passed through, refused, or 400 naming the field), and the
client's own tools (returned as `tool_calls`, MCP tools still run here). The upstream is the
scripted model server (a stand-in for a GPU model, which would need the accelerator) that
records every body it receives; the MCP server is real."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import openai
import pytest

from serving.frontdoor.app import FrontDoorConfig
from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import RunningServer, start
from testkit.frontdoor import Door, upstream_for, weather_then_answer
from training.evaluation.scripted import Scripted, serve_in_thread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
Message = dict[str, Any]
WEATHER = [{"role": "user", "content": "Weather in Paris?"}]
ORDER_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Status of an order in the client's own system.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
}


@pytest.fixture(scope="module")
def mcp() -> Iterator[RunningServer]:
    with start(ServerConfig(port=0, workers=1, log_level="warning")) as running:
        yield running


class Endpoint:
    """A front door over a scripted upstream whose script a test may replace."""

    def __init__(self, mcp: RunningServer, **config: Any) -> None:
        self.script: Any = weather_then_answer
        self.received: list[dict[str, Any]] = []
        self._backend = serve_in_thread(lambda m, t: self.script(m, t), received=self.received)
        backend_url = self._backend.__enter__()
        self.door = Door(FrontDoorConfig(**config))
        self.url = self.door.open(upstream_for(backend_url, mcp.url, "7"))
        self.client = openai.OpenAI(base_url=self.url, api_key="x", max_retries=0)

    def close(self) -> None:
        self.door.close()
        self._backend.__exit__(None, None, None)

    def post(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            f"{self.url}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url.removesuffix("/v1") + "/health", timeout=10) as r:
            result: dict[str, Any] = json.loads(r.read())
            return result


@pytest.fixture
def endpoint(mcp: RunningServer) -> Iterator[Endpoint]:
    front = Endpoint(mcp)
    yield front
    front.close()


# --- streaming -------------------------------------------------------------------------------
def test_a_stream_reports_tool_calls_as_they_run_then_the_answer_and_usage(
    endpoint: Endpoint,
) -> None:
    chunks = list(
        endpoint.client.chat.completions.create(
            model="toolrl", messages=WEATHER, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    events = [
        c.model_extra["toolrl"]["event"]
        for c in chunks
        if "event" in c.model_extra.get("toolrl", {})
    ]
    assert [(e["type"], e["name"]) for e in events] == [
        ("tool_call", "get_current_weather"),
        ("tool_result", "get_current_weather"),
    ]
    assert events[0]["arguments"] == {"location": "Paris"}
    assert "Paris" in events[1]["result"] and events[1]["is_error"] is False
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("It is ") and "Paris" in text  # the tool's result reached the answer
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    assert final.model_extra["toolrl"]["model_version"] == "7"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 2 * 120  # two model turns of (100 + 20) tokens
    assert len({c.id for c in chunks}) == 1


def test_the_raw_stream_is_server_sent_events_ending_in_done(endpoint: Endpoint) -> None:
    request = urllib.request.Request(
        f"{endpoint.url}/chat/completions",
        data=json.dumps({"messages": WEATHER, "stream": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        body = response.read().decode()
    events = [block for block in body.split("\n\n") if block.strip()]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    assert all(json.loads(e[6:])["object"] == "chat.completion.chunk" for e in events[:-1])


def test_an_upstream_failure_mid_stream_ends_it_with_an_error_event(endpoint: Endpoint) -> None:
    def fails_after_the_tool(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        if any(m.get("role") == "tool" for m in messages):
            return Scripted(status=503, body='{"error": "model server overloaded"}')
        return weather_then_answer(messages, tools)

    endpoint.script = fails_after_the_tool
    stream = endpoint.client.chat.completions.create(model="toolrl", messages=WEATHER, stream=True)
    seen: list[Any] = []
    with pytest.raises(openai.APIError, match="upstream failure"):
        seen.extend(stream)
    assert any("event" in c.model_extra.get("toolrl", {}) for c in seen)  # it had started
    assert endpoint.health()["in_flight"] == 0


def test_garbage_from_the_upstream_mid_stream_is_an_error_event_not_a_hang(
    endpoint: Endpoint,
) -> None:
    endpoint.script = lambda m, t: Scripted(status=200, body="{not json")
    stream = endpoint.client.chat.completions.create(model="toolrl", messages=WEATHER, stream=True)
    with pytest.raises(openai.APIError, match="invalid JSON"):
        list(stream)


def test_a_client_that_disconnects_cancels_its_episode(endpoint: Endpoint) -> None:
    entered, release = threading.Event(), threading.Event()

    def held(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        entered.set()
        release.wait(30)
        return Scripted(content="too late")

    endpoint.script = held
    host, port = endpoint.url.removeprefix("http://").removesuffix("/v1").split(":")
    body = json.dumps({"messages": WEATHER, "stream": True}).encode()
    try:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                + f"\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            seen = b""
            while b"chat.completion.chunk" not in seen:  # the stream has started
                piece = sock.recv(4096)
                assert piece, f"the front door closed the stream: {seen!r}"
                seen += piece
            assert entered.wait(30)
            assert endpoint.health()["in_flight"] == 1
        deadline = time.monotonic() + 20
        while endpoint.health()["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert endpoint.health()["in_flight"] == 0  # cancelled while the model still "ran"
        assert not release.is_set()
    finally:
        release.set()


# --- request fields -------------------------------------------------------------------------
def test_sampling_fields_reach_the_upstream_on_every_model_call(endpoint: Endpoint) -> None:
    reply = endpoint.client.chat.completions.create(
        model="toolrl",
        messages=WEATHER,
        temperature=0.3,
        top_p=0.9,
        max_completion_tokens=77,
        stop=["###"],
        seed=11,
        user="ignored-by-design",
        extra_body={"an_unknown_field": {"is": "ignored"}},
    )
    assert reply.choices[0].finish_reason == "stop"
    assert len(endpoint.received) == 2
    for body in endpoint.received:
        assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.3, 0.9, 77)
        assert (body["stop"], body["seed"]) == (["###"], 11)
        assert "an_unknown_field" not in body and "user" not in body


def test_tool_choice_reaches_the_first_model_call_only(endpoint: Endpoint) -> None:
    endpoint.client.chat.completions.create(
        model="toolrl",
        messages=WEATHER,
        tool_choice={"type": "function", "function": {"name": "get_current_weather"}},
    )
    first, second = endpoint.received
    assert first["tool_choice"] == {"type": "function", "function": {"name": "get_current_weather"}}
    assert "tool_choice" not in second  # later turns are free to answer


def test_tool_choice_none_answers_without_tools(endpoint: Endpoint) -> None:
    reply = endpoint.client.chat.completions.create(
        model="toolrl", messages=WEATHER, tool_choice="none"
    )
    [body] = endpoint.received
    assert "tools" not in body and body["tool_choice"] == "none"
    assert reply.model_extra["toolrl"]["tool_calls"] == []  # the scripted call was not run


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", "hot", "temperature must be a number between 0 and 2"),
        ("temperature", 3, "temperature must be a number between 0 and 2"),
        ("top_p", 0, "top_p must be a number in (0, 1]"),
        ("max_tokens", 0, "max_tokens must be an integer"),
        ("max_completion_tokens", 2.5, "max_completion_tokens must be an integer"),
        ("stop", [1], "stop must be a string or a list"),
        ("stop", ["a", "b", "c", "d", "e"], "stop must be a string or a list"),
        ("seed", 1.5, "seed must be an integer"),
        ("stream", "yes", "stream must be a boolean"),
        ("stream_options", {"include_usage": True}, "only allowed when stream is true"),
        ("n", 2, "n must be 1"),
        ("n", "2", "n must be an integer"),
        ("logprobs", True, "logprobs are not available"),
        ("top_logprobs", 2, "logprobs are not available"),
        ("response_format", {"type": "json_object"}, "'json_object' is not supported"),
        ("response_format", "json", "response_format must be an object"),
        ("tool_choice", 5, "tool_choice must be"),
        ("tool_choice", {"type": "function", "function": {"name": "nope"}}, "not among the tools"),
        ("tools", [{"type": "retrieval"}], "tools[0] must be"),
        ("tools", [{"type": "function", "function": {"name": "has space"}}], "function.name"),
        ("tools", [ORDER_TOOL, ORDER_TOOL], "listed twice"),
        ("parallel_tool_calls", "yes", "parallel_tool_calls must be a boolean"),
    ],
)
def test_a_wrong_known_field_is_a_400_naming_it(
    endpoint: Endpoint, field: str, value: Any, message: str
) -> None:
    status, body = endpoint.post({"messages": WEATHER, field: value})
    assert status == 400, body
    assert message in body["error"]["message"]
    assert endpoint.received == []  # refused before any model call


def test_the_sdk_sees_a_refusal_as_bad_request(endpoint: Endpoint) -> None:
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        endpoint.client.chat.completions.create(model="toolrl", messages=WEATHER, n=2)


def test_response_format_text_is_accepted(endpoint: Endpoint) -> None:
    status, body = endpoint.post({"messages": WEATHER, "response_format": {"type": "text"}})
    assert status == 200 and body["choices"][0]["message"]["content"].startswith("It is")


# --- the client's own tools -------------------------------------------------------------------
def order_script(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
    """Calls the client's tool and the server's weather tool in one turn, then answers."""
    results = {m.get("tool_call_id"): m["content"] for m in messages if m.get("role") == "tool"}
    if not results:
        return Scripted(
            calls=[
                ("lookup_order", {"order_id": "A-17"}),
                ("get_current_weather", {"location": "Paris"}),
            ]
        )
    return Scripted(content="answer from: " + " | ".join(str(v)[:40] for v in results.values()))


def test_calls_to_client_tools_come_back_for_the_client_to_run(endpoint: Endpoint) -> None:
    endpoint.script = order_script
    reply = endpoint.client.chat.completions.create(
        model="toolrl",
        messages=[{"role": "user", "content": "Where is order A-17, and is it raining?"}],
        tools=[ORDER_TOOL],  # type: ignore[list-item]
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.function.name == "lookup_order"
    assert json.loads(call.function.arguments) == {"order_id": "A-17"}
    trace = reply.model_extra["toolrl"]
    assert [c["name"] for c in trace["tool_calls"]] == ["get_current_weather"]  # ran here
    shown = {t["function"]["name"] for t in endpoint.received[0]["tools"]}
    assert "lookup_order" in shown and "get_current_weather" in shown

    follow_up = endpoint.client.chat.completions.create(
        model="toolrl",
        messages=[
            {"role": "user", "content": "Where is order A-17, and is it raining?"},
            choice.message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": call.id, "content": "shipped on Monday"},
        ],
        tools=[ORDER_TOOL],  # type: ignore[list-item]
    )
    assert follow_up.choices[0].finish_reason == "stop"
    assert "shipped on Monday" in (follow_up.choices[0].message.content or "")


def test_a_streamed_client_tool_call_arrives_as_tool_call_deltas(endpoint: Endpoint) -> None:
    endpoint.script = order_script
    chunks = list(
        endpoint.client.chat.completions.create(
            model="toolrl",
            messages=WEATHER,
            tools=[ORDER_TOOL],
            stream=True,  # type: ignore[list-item]
        )
    )
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(d.index, d.function.name if d.function else None) for d in deltas] == [
        (0, "lookup_order")
    ]
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["tool_calls"]


def test_a_client_tool_named_like_a_server_tool_is_refused(endpoint: Endpoint) -> None:
    clash = {"type": "function", "function": {"name": "get_current_weather", "parameters": {}}}
    with pytest.raises(openai.BadRequestError, match="already server-side MCP tools"):
        endpoint.client.chat.completions.create(
            model="toolrl",
            messages=WEATHER,
            tools=[clash],  # type: ignore[list-item]
        )
    assert endpoint.received == []
