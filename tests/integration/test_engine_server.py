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
from serving.runtime.ports import free_port
from serving.tools import get_catalog
from training.model.tiny import TinyModelConfig, build_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
NICE = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    root = tmp_path_factory.mktemp("engine")
    model = build_tiny_model(root / "tiny", TinyModelConfig(hidden_size=64, num_layers=2))
    config = BackendConfig(
        backend="cpu", model_dir=model, port=free_port(), dtype="float32", nice=NICE
    )
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
        (json.dumps({"messages": MESSAGES, "stream": "yes"}).encode(), 400, "stream"),
        (
            json.dumps({"messages": MESSAGES, "stream_options": {"include_usage": True}}).encode(),
            400,
            "stream_options",
        ),
        (
            json.dumps({"messages": MESSAGES, "stream": True, "stream_options": []}).encode(),
            400,
            "stream_options",
        ),
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


PROSE: dict[str, Any] = {"max_tokens": 40, "temperature": 1.0, "seed": 11}
"""Greedy decoding makes the random tiny model write newlines; seeded sampling, prose."""


def _streamed(server: ModelServer, **fields: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The chunks of a streamed chat, and the message they add up to."""
    body = {"model": "toolrl", "messages": MESSAGES, "stream": True, **fields}
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    chunks: list[dict[str, Any]] = []
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert reply.headers["Content-Type"].startswith("text/event-stream")
        lines = [line.decode().strip() for line in reply]
    events = [line[6:] for line in lines if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    message: dict[str, Any] = {"content": "", "tool_calls": [], "finish_reason": None}
    for chunk in chunks:
        assert chunk["object"] == "chat.completion.chunk"
        for choice in chunk["choices"]:
            delta = choice["delta"]
            message["content"] += delta.get("content") or ""
            message["tool_calls"] += delta.get("tool_calls") or []
            message["finish_reason"] = choice["finish_reason"] or message["finish_reason"]
    return chunks, message


def test_a_stream_sends_the_prose_token_by_token_and_adds_up_to_the_plain_reply(
    server: ModelServer,
) -> None:
    plain = _chat(server, **PROSE)["choices"][0]
    chunks, streamed = _streamed(server, **PROSE, stream_options={"include_usage": True})
    pieces = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert streamed["content"].strip() == plain["message"]["content"].strip()
    assert streamed["finish_reason"] == plain["finish_reason"]
    if "<tool_call" not in plain["message"]["content"]:
        assert len(pieces) > 5, "the prose arrived in one piece, not as it was decoded"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 40


def test_a_stream_stops_at_a_stop_string_without_sending_any_of_it(server: ModelServer) -> None:
    text = _chat(server, **PROSE)["choices"][0]["message"]["content"]
    stop = text.strip()[6:9]
    assert len(stop) == 3, text
    _, streamed = _streamed(server, **PROSE, stop=[stop])
    expected = _chat(server, **PROSE, stop=[stop])["choices"][0]["message"]["content"]
    assert streamed["content"].strip() == expected.strip()
    assert stop not in streamed["content"] and streamed["finish_reason"] == "stop"


def test_a_forced_call_streams_no_prose_and_ends_as_the_plain_reply_does(
    server: ModelServer,
) -> None:
    fields: dict[str, Any] = {
        "tools": get_catalog().openai_schemas(),
        "tool_choice": {"type": "function", "function": {"name": "get_current_weather"}},
        "max_tokens": 3,
    }
    plain = _chat(server, **fields)["choices"][0]
    chunks, streamed = _streamed(server, **fields)
    prose = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(prose) == 1, "a call's opening must not leak out a token at a time"
    assert streamed["content"] == plain["message"]["content"]
    assert streamed["finish_reason"] == plain["finish_reason"]


def test_a_client_that_leaves_mid_stream_frees_its_engine_row(server: ModelServer) -> None:
    import http.client
    import time

    host, port = server.base_url.removeprefix("http://").removesuffix("/v1").split(":")
    body = {"model": "toolrl", "messages": MESSAGES, "stream": True, "max_tokens": 3000}
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request(
        "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
    )
    reply = connection.getresponse()
    assert reply.status == 200
    assert reply.readline().startswith(b"data: ")  # the stream is running
    health = server.base_url.removesuffix("/v1") + "/health"
    with urllib.request.urlopen(health, timeout=10) as seen:
        assert json.loads(seen.read())["in_flight"] == 1
    reply.close()
    connection.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with urllib.request.urlopen(health, timeout=10) as seen:
            if json.loads(seen.read())["in_flight"] == 0:
                return
        time.sleep(0.2)
    pytest.fail("the engine kept generating for a client that left")


def test_completions_refuse_stream_clearly(server: ModelServer) -> None:
    body = json.dumps({"prompt": "hi", "stream": True}).encode()
    code, payload = post(server, "/completions", body)
    assert code == 400 and "chat/completions" in payload["error"]["message"]


def test_the_engine_runs_at_the_lower_cpu_priority_it_was_given(server: ModelServer) -> None:
    import os

    assert server.process is not None
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, server.process.pid) == min(19, ours + NICE)


def test_serving_lowers_a_cpu_engines_priority_by_default(tmp_path: Path) -> None:
    from serving.serve import ServeConfig, backend_config

    def command(backend: str) -> list[str]:
        config = ServeConfig(
            model_uri="models:/m@champion",
            tracking_uri="http://x",
            backend=backend,
            mcp_url="http://y/mcp",
        )
        from serving.launch.commands import build_command

        return build_command(backend_config(config, tmp_path, "hermes"))

    cpu = command("cpu")
    assert cpu[cpu.index("--nice") + 1] == "10"
    assert "--nice" not in command("vllm")


def _threads(server: ModelServer) -> int:
    health = server.base_url.removesuffix("/v1") + "/health"
    with urllib.request.urlopen(health, timeout=10) as reply:
        return int(json.loads(reply.read())["threads"])


def test_a_reload_halves_both_engines_threads_while_they_overlap(tmp_path: Path) -> None:
    """Blue/green on one CPU: while the old engine drains beside the new one, each runs on
    half the threads (both spinning on every core slowed each other ~7x: 7.4 -> 1.1 decode
    steps/s on the demo model); the survivor gets them all back."""
    import asyncio

    from serving.launch.switch import Switchboard, Upstream

    model = build_tiny_model(tmp_path / "tiny", TinyModelConfig(hidden_size=64, num_layers=2))

    def engine() -> ModelServer:
        config = BackendConfig(
            backend="cpu", model_dir=model, port=free_port(), dtype="float32",
            extra_args=("--threads", "2"),
        )  # fmt: skip
        return ModelServer(config, tmp_path / "logs").start(timeout_s=120)

    old = engine()
    new: list[ModelServer] = []

    async def stop_old() -> None:
        await asyncio.to_thread(old.stop)

    async def launch() -> Upstream:
        new.append(await asyncio.to_thread(engine))

        async def keep() -> None:
            return None

        return Upstream("2", agent=None, stop=keep, share=new[0].share_cores)

    async def scenario() -> dict[str, tuple[int, ...]]:
        first = Upstream("1", agent=None, stop=stop_old, share=old.share_cores)
        seen: dict[str, tuple[int, ...]] = {"before": (_threads(old),)}
        board = Switchboard(first)
        first.enter()  # a request still running on the old engine
        reload = asyncio.create_task(board.reload(launch))
        while board.current is first:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # signals are delivered asynchronously
        seen["overlap"] = (_threads(old), _threads(new[0]))
        first.leave()  # the old engine's last request ends: it drains and stops
        assert await reload
        await asyncio.sleep(0.3)
        seen["after"] = (_threads(new[0]),)
        return seen

    try:
        seen = asyncio.run(scenario())
    finally:
        old.stop()
        for server in new:
            server.stop()
    assert seen == {"before": (2,), "overlap": (1, 1), "after": (2,)}
    assert old.process is not None and old.process.poll() is not None  # drained, stopped


def test_the_served_engine_steps_on_the_main_thread_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    """`serve_on_main_thread` in this process (its signal handlers restored after): a chat
    request is answered, every decode step ran on the main thread (a real forward hook on
    the output head), and SIGTERM ends it, HTTP first, returning here."""
    import os
    import signal
    import threading
    import time

    from serving.engine.server import EngineServer, load, serve_on_main_thread

    model_dir = build_tiny_model(tmp_path / "tiny", TinyModelConfig(hidden_size=64, num_layers=2))
    handle = load(str(model_dir), "tiny", "float32", 4, 1, own_thread=False)
    seen: set[int] = set()
    head = handle.worker.engine.model.get_output_embeddings()
    hook = head.register_forward_pre_hook(lambda *_: seen.add(threading.get_ident()))
    port = free_port()
    answered: list[int] = []

    def client_then_sigterm() -> None:
        body = json.dumps({"model": "tiny", "messages": MESSAGES, "max_tokens": 4}).encode()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not answered:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    data=body,
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=30) as reply:
                    answered.append(reply.status)
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)  # not listening yet
        os.kill(os.getpid(), signal.SIGTERM)

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    caller = threading.Thread(target=client_then_sigterm, daemon=True)
    try:
        caller.start()
        serve_on_main_thread(handle, EngineServer(handle).app(), "127.0.0.1", port)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        hook.remove()
    caller.join(10)
    assert answered == [200]
    assert seen == {threading.get_ident()}  # the main thread stepped every decode
    assert not [t for t in threading.enumerate() if t.name == "toolrl-http" and t.is_alive()]


def test_a_served_engine_whose_port_is_taken_stops_and_says_so(tmp_path: Path) -> None:
    """The HTTP side cannot bind (another socket holds the port): the engine on the main
    thread stops and the bind error is raised here, instead of an engine left stepping with
    nothing in front of it."""
    import signal
    import socket

    from serving.engine.server import EngineServer, load, serve_on_main_thread

    model_dir = build_tiny_model(tmp_path / "tiny", TinyModelConfig(hidden_size=64, num_layers=2))
    handle = load(str(model_dir), "tiny", "float32", 4, 1, own_thread=False)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        try:
            with pytest.raises(OSError):
                serve_on_main_thread(handle, EngineServer(handle).app(), "127.0.0.1", port)
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
