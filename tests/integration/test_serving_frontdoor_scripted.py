"""The front door (OpenAI-compatible, runs the agent loop) called with the `openai` client,
in front of a scripted model server and the real MCP server: answers, tool traces, hostile
requests, auth, capacity, upstream failure, and a blue/green reload under load."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import openai
import pytest

from serving.agent import Agent, ChatClient, EndpointBackend
from serving.frontdoor.app import FrontDoorConfig
from serving.launch.switch import Upstream
from serving.mcp_client.http import McpHttpClient
from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import RunningServer, start
from serving.renderer import ChatRenderer
from testkit.frontdoor import Door, upstream_for
from training.evaluation.scripted import Scripted, serve_in_thread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
Message = dict[str, Any]
KEY = "front-door-key"


def weather_script(label: str) -> Any:
    def reply(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        results = [m for m in messages if m.get("role") == "tool"]
        if not results:
            return Scripted(calls=[("get_current_weather", {"location": "Paris"})])
        return Scripted(content=f"{label}: {results[-1]['content'][:80]}")

    return reply


@pytest.fixture(scope="module")
def mcp() -> Iterator[RunningServer]:
    with start(ServerConfig(port=0, workers=1, log_level="warning")) as running:
        yield running


@pytest.fixture
def door(mcp: RunningServer) -> Iterator[tuple[Door, str]]:
    with serve_in_thread(weather_script("v1")) as backend:
        front = Door(FrontDoorConfig(api_key=KEY, max_concurrent=4, queue_timeout_s=0.5))
        url = front.open(upstream_for(backend, mcp.url, "1"))
        yield front, url
        front.close()


def test_scripted_openai_client_gets_the_answer_after_real_tool_calls(
    door: tuple[Door, str],
) -> None:
    _, url = door
    client = openai.OpenAI(base_url=url, api_key=KEY)
    reply = client.chat.completions.create(
        model="toolrl", messages=[{"role": "user", "content": "Weather in Paris?"}]
    )
    content = reply.choices[0].message.content or ""
    assert content.startswith("v1: ") and "Paris" in content  # the real tool's result
    trace = (reply.model_extra or {})["toolrl"]
    assert [{k: c[k] for k in ("name", "arguments", "is_error")} for c in trace["tool_calls"]] == [
        {"name": "get_current_weather", "arguments": {"location": "Paris"}, "is_error": False}
    ]
    assert json.loads(trace["tool_calls"][0]["result"])["location"] == "Paris"  # what ran
    assert trace["model_version"] == "1" and reply.choices[0].finish_reason == "stop"
    assert [m.id for m in client.models.list().data] == ["toolrl"]


def raw_post(url: str, body: bytes, key: str | None = KEY) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{url}/chat/completions", body, headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"messages": []}', 400, "non-empty list"),
        (b'{"messages": "hi"}', 400, "non-empty list"),
        (b'{"messages": [{"role": "wizard", "content": "x"}]}', 400, "needs a role"),
        (b'{"messages": [{"role": "user", "content": {"a": 1}}]}', 400, "must be a string"),
        (b'{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', 400, "text"),
        (b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', 400, "stream"),
        (b'{"messages": [{"role": "assistant", "content": "x"}]}', 400, "last message"),
        (b'{"messages": [{"role": "assistant", "content": "", "tool_calls": [5]},'
         b' {"role": "user", "content": "x"}]}', 400, "function.name"),
        (b"[" * 1_100_000 + b"]" * 1_100_000, 413, "larger than"),
        (b'{"messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", 400, "not valid JSON"),
    ],
)  # fmt: skip
def test_scripted_hostile_requests_get_clear_openai_errors(
    door: tuple[Door, str], body: bytes, status: int, message: str
) -> None:
    _, url = door
    got, payload = raw_post(url, body)
    assert got == status
    assert message in payload["error"]["message"]


def test_scripted_auth_is_required_when_configured(door: tuple[Door, str]) -> None:
    _, url = door
    status, payload = raw_post(url, b'{"messages": [{"role": "user", "content": "x"}]}', key=None)
    assert status == 401 and payload["error"]["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url, api_key="wrong").chat.completions.create(
            model="toolrl", messages=[{"role": "user", "content": "x"}]
        )


def test_scripted_upstream_failure_is_a_502_not_a_hang(mcp: RunningServer) -> None:
    front = Door(FrontDoorConfig())
    dead = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    url = front.open(upstream_for(dead, mcp.url, "dead"))
    try:
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model="t", messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 502
        assert "upstream failure" in str(info.value)
    finally:
        front.close()


def test_scripted_reload_switches_without_failed_requests(mcp: RunningServer) -> None:
    stack = contextlib.ExitStack()
    v1 = serve_in_thread(weather_script("v1"))
    v1_url = v1.__enter__()
    front = Door(FrontDoorConfig(max_concurrent=32))
    url = front.open(
        upstream_for(v1_url, mcp.url, "1", on_stop=lambda: v1.__exit__(None, None, None))
    )
    answers: list[str] = []
    errors: list[str] = []
    done = threading.Event()

    def hammer() -> None:
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        while not done.is_set():
            try:
                reply = client.chat.completions.create(
                    model="t", messages=[{"role": "user", "content": "Weather?"}]
                )
                answers.append((reply.choices[0].message.content or "")[:2])
            except Exception as exc:
                errors.append(repr(exc))

    workers = [threading.Thread(target=hammer) for _ in range(4)]
    try:
        for worker in workers:
            worker.start()
        time.sleep(1.0)
        v2_url = stack.enter_context(serve_in_thread(weather_script("v2")))

        async def launch() -> Upstream:
            await asyncio.sleep(0.3)  # a backend takes a while to come up
            return upstream_for(v2_url, mcp.url, "2")

        assert front.switchboard is not None
        assert front.call(front.switchboard.reload(launch))
        time.sleep(1.0)
    finally:
        done.set()
        for worker in workers:
            worker.join(30)
        front.close()
        stack.close()
    assert errors == []
    assert "v1" in answers and answers[-1] == "v2"
    switched = answers.index("v2")
    assert set(answers[switched:]) <= {"v1", "v2"} and len(answers) > 20
    with pytest.raises(OSError):  # the old backend was stopped after draining
        urllib.request.urlopen(v1_url.removesuffix("/v1") + "/health", timeout=2)


def test_scripted_capacity_and_deadline_give_429_and_504(mcp: RunningServer) -> None:
    """Ordered by events, not by sleeps: the first request holds the only slot (its model call
    blocks until released), then two more find the slot taken and are refused after the
    queue timeout; the first is cut off by the request deadline."""
    entered, release = threading.Event(), threading.Event()

    def held(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        entered.set()
        release.wait(30)
        return Scripted(content="late")

    with serve_in_thread(held) as backend:
        front = Door(FrontDoorConfig(max_concurrent=1, queue_timeout_s=0.2, request_timeout_s=4))
        url = front.open(upstream_for(backend, mcp.url, "1"))
        body = b'{"messages": [{"role": "user", "content": "x"}]}'
        statuses: dict[str, int] = {}

        def post(name: str) -> threading.Thread:
            thread = threading.Thread(
                target=lambda: statuses.__setitem__(name, raw_post(url, body, None)[0])
            )
            thread.start()
            return thread

        try:
            first = post("first")
            assert entered.wait(30), "the first request never reached the model"
            queued = [post("second"), post("third")]
            for thread in queued:
                thread.join(30)
            assert (statuses["second"], statuses["third"]) == (429, 429)  # the slot was taken
            first.join(30)
            assert statuses["first"] == 504  # the deadline, while the model still ran
        finally:
            release.set()
            front.close()


def test_scripted_agent_bug_fails_one_request_not_the_server(mcp: RunningServer) -> None:
    class BrokenRenderer(ChatRenderer):
        def text(self, *args: Any, **kwargs: Any) -> str:
            raise RuntimeError("template exploded")

    def always_500(messages: Sequence[Message], tools: Sequence[Message]) -> Scripted:
        return Scripted(status=500, body="{}")

    with serve_in_thread(always_500) as backend:
        chat = ChatClient(backend, "scripted")
        backend_ = EndpointBackend(chat, renderer=BrokenRenderer(tokenizer=None))
        agent = Agent(backend_, McpHttpClient(mcp.url))
        front = Door(FrontDoorConfig())
        url = front.open(Upstream(version="1", agent=agent, stop=chat.close))
        try:
            status, payload = raw_post(url, b'{"messages": [{"role": "user", "content": "x"}]}')
            assert status == 502 and "template exploded" in payload["error"]["message"]
            with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=5) as r:
                assert r.status == 200
        finally:
            front.close()


def test_a_refused_key_runs_nothing_upstream(mcp: RunningServer) -> None:
    """401 before anything happens: the model server sees no request, no tool is called."""
    received: list[dict[str, Any]] = []
    with serve_in_thread(weather_script("v1"), received=received) as backend:
        front = Door(FrontDoorConfig(api_key=KEY))
        url = front.open(upstream_for(backend, mcp.url, "1"))
        try:
            body = b'{"messages": [{"role": "user", "content": "weather in Paris?"}]}'
            for key in (None, "wrong", KEY[:-1], KEY + "x"):
                status, payload = raw_post(url, body, key=key)
                assert status == 401, key
                assert payload["error"]["type"] == "authentication_error"
            assert received == []
            status, _ = raw_post(url, body, key=KEY)
            assert status == 200 and len(received) == 2  # the key works; then it runs
        finally:
            front.close()
