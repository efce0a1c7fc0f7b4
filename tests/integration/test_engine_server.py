"""The project's CPU model server (`serving.engine.server`) as a real process on loopback:
OpenAI chat and completions through the `openai` client, concurrent requests batched
without changing answers, and hostile bodies answered with clear 4xx errors."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from serving.launch.commands import BackendConfig
from serving.launch.process import ModelServer
from serving.tools import get_catalog
from training.demo.services import free_port
from training.model.tiny import TinyModelConfig, build_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    root = tmp_path_factory.mktemp("engine")
    model = build_tiny_model(root / "tiny", TinyModelConfig(hidden_size=64, num_layers=2))
    config = BackendConfig(backend="cpu", model_dir=model, port=free_port(), dtype="float32")
    running = ModelServer(config, root / "logs").start(timeout_s=120)
    yield running
    running.stop()


def post(server: ModelServer, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{server.base_url}{path}", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def client(server: ModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", timeout=60)


MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant with access to tools."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


def test_chat_with_tools_answers_in_openai_shape(server: ModelServer) -> None:
    reply = client(server).chat.completions.create(
        model="toolrl",
        messages=MESSAGES,  # type: ignore[arg-type]
        tools=get_catalog().openai_schemas(),  # type: ignore[arg-type]
        max_tokens=24,
    )
    choice = reply.choices[0]
    assert choice.finish_reason in {"stop", "length", "tool_calls"}
    assert choice.message.role == "assistant"
    assert reply.usage is not None and reply.usage.prompt_tokens > 500  # the tool list is in it
    assert 0 < reply.usage.completion_tokens <= 24


def test_concurrent_requests_get_the_answers_they_get_alone(server: ModelServer) -> None:
    questions = [f"What is {i} plus {i}?" for i in range(6)]

    def ask(question: str) -> str:
        reply = client(server).completions.create(
            model="toolrl",
            prompt=f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n",
            max_tokens=12,
            temperature=0,
        )
        return reply.choices[0].text

    alone = [ask(q) for q in questions]
    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(ask, questions))
    assert together == alone


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (json.dumps({"messages": "hi"}).encode(), 400, "messages"),
        (json.dumps({"messages": [{"content": "x"}]}).encode(), 400, "role"),
        (json.dumps({"messages": MESSAGES, "n": 2}).encode(), 400, "n must be 1"),
        (json.dumps({"messages": MESSAGES, "temperature": "hot"}).encode(), 400, "temperature"),
        (json.dumps({"messages": MESSAGES, "max_tokens": -3}).encode(), 400, "max_tokens"),
        (json.dumps({"messages": MESSAGES, "stop": [1]}).encode(), 400, "stop"),
        (json.dumps({"messages": MESSAGES, "tools": "all"}).encode(), 400, "tools"),
        (json.dumps({"messages": MESSAGES, "stream": True}).encode(), 400, "stream"),
        (
            json.dumps({"messages": MESSAGES, "max_tokens": 4096, "x": "y" * 30_000}).encode(),
            400,
            "context",
        ),
    ],
)
def test_hostile_chat_bodies_get_clear_errors(
    server: ModelServer, body: bytes, status: int, message: str
) -> None:
    code, payload = post(server, "/chat/completions", body)
    assert code == status
    assert message in payload["error"]["message"]


def test_a_huge_body_is_refused_and_the_server_lives_on(server: ModelServer) -> None:
    code, _ = post(server, "/completions", b'{"prompt": "' + b"a" * (5 * 1024 * 1024) + b'"}')
    assert code == 413
    code, payload = post(
        server, "/completions", json.dumps({"prompt": "hi", "max_tokens": 3}).encode()
    )
    assert code == 200 and payload["choices"][0]["finish_reason"] in {"stop", "length"}


def test_models_and_health(server: ModelServer) -> None:
    with urllib.request.urlopen(f"{server.base_url}/models", timeout=10) as reply:
        assert json.loads(reply.read())["data"][0]["id"] == "toolrl"
    health = server.base_url.removesuffix("/v1") + "/health"
    with urllib.request.urlopen(health, timeout=10) as reply:
        assert json.loads(reply.read())["status"] == "ok"


def test_hermes_calls_become_tool_calls_and_broken_ones_stay_text() -> None:
    from serving.engine.server import split_tool_calls

    content, calls = split_tool_calls(
        "Checking.\n<tool_call>\n"
        '{"name": "get_current_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
    )
    assert content == "Checking."
    assert calls[0]["function"] == {
        "name": "get_current_weather",
        "arguments": '{"location": "Paris"}',
    }
    for broken in (
        '<tool_call>\n{"name": "x", "arguments": {"a": 1\n</tool_call>',
        '<tool_call>\n{"arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "x", "arguments": [1]}\n</tool_call>',
        '<tool_call>\n{"name": "x"}\n</tool_call><tool_call>\n{"name": "y"',
    ):
        text, none = split_tool_calls(broken)
        assert none == [] and text == broken


def test_model_dir_path_is_unused_by_clients(tmp_path: Path) -> None:
    config = BackendConfig(backend="cpu", model_dir=tmp_path, port=9)
    assert config.request_model_name == "toolrl"


def _chat(server: ModelServer, **fields: Any) -> dict[str, Any]:
    body = {"model": "toolrl", "messages": MESSAGES, "max_tokens": 1, **fields}
    status, reply = post(server, "/chat/completions", json.dumps(body).encode())
    assert status == 200, reply
    return reply


def test_tool_choice_shapes_the_prompt_and_the_start_of_the_reply(server: ModelServer) -> None:
    tools = get_catalog().openai_schemas()
    auto = _chat(server, tools=tools)
    none = _chat(server, tools=tools, tool_choice="none")
    assert none["usage"]["prompt_tokens"] < auto["usage"]["prompt_tokens"]  # no tool list
    named = _chat(
        server,
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "get_current_weather"}},
    )
    text = named["choices"][0]["message"]["content"]
    # one generated token cannot finish the call, so the forced opening stays visible as text
    assert text.startswith('<tool_call>\n{"name": "get_current_weather", "arguments": ')
    assert named["usage"]["prompt_tokens"] > auto["usage"]["prompt_tokens"]  # the forced part
    required = _chat(server, tools=tools, tool_choice="required")
    assert required["choices"][0]["message"]["content"].startswith("<tool_call>\n")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tool_choice": "required"}, "needs tools"),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not among"),
        ({"tool_choice": 7}, "tool_choice must be"),
    ],
)
def test_impossible_tool_choices_are_refused(
    server: ModelServer, fields: dict[str, Any], message: str
) -> None:
    body = {"model": "toolrl", "messages": MESSAGES, **fields}
    status, reply = post(server, "/chat/completions", json.dumps(body).encode())
    assert status == 400 and message in reply["error"]["message"]
