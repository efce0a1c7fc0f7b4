"""Token-level streaming through the whole serving path, on real processes: the `openai` SDK
streams from the front door, which streams from the CPU engine server (a tiny random model,
which needs no accelerator) with the real MCP server behind it. The answer must arrive in
pieces as it is decoded, and add up to exactly what the same request answers unstreamed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from serving.frontdoor.app import FrontDoorConfig
from serving.launch.commands import BackendConfig
from serving.launch.process import ModelServer
from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import start
from serving.runtime.ports import free_port
from testkit.frontdoor import Door, upstream_for
from training.model.tiny import TinyModelConfig, build_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
QUESTION = [{"role": "user", "content": "Tell me about Paris."}]
SEEDED: dict[str, Any] = {"temperature": 1.0, "seed": 5, "max_tokens": 48}
"""Greedy decoding makes the random tiny model write newlines; seeded sampling, prose."""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    root = tmp_path_factory.mktemp("token-stream")
    model = build_tiny_model(root / "tiny", TinyModelConfig(hidden_size=64, num_layers=2))
    config = BackendConfig(backend="cpu", model_dir=model, port=free_port(), dtype="float32")
    engine = ModelServer(config, root / "logs").start(timeout_s=120)
    try:
        with start(ServerConfig(port=0, workers=1, log_level="warning")) as mcp:
            door = Door(FrontDoorConfig())
            try:
                url = door.open(upstream_for(engine.base_url, mcp.url, "1"))
                yield openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=60)
            finally:
                door.close()
    finally:
        engine.stop()


def test_the_answer_streams_token_by_token_and_equals_the_plain_answer(
    client: openai.OpenAI,
) -> None:
    plain = client.chat.completions.create(
        model="toolrl",
        messages=QUESTION,  # type: ignore[arg-type]
        tool_choice="none",
        **SEEDED,
    )
    answer = plain.choices[0].message.content or ""
    assert len(answer) > 20, "the tiny model wrote too little to see streaming"
    pieces: list[str] = []
    finishes: list[str] = []
    usage = None
    for chunk in client.chat.completions.create(
        model="toolrl",
        messages=QUESTION,  # type: ignore[arg-type]
        tool_choice="none",
        stream=True,
        stream_options={"include_usage": True},
        **SEEDED,
    ):
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
        usage = chunk.usage or usage
    assert "".join(pieces) == answer
    assert len(pieces) >= 5, f"the answer came in {len(pieces)} piece(s), not as decoded"
    assert finishes == [plain.choices[0].finish_reason]
    assert usage is not None and usage.completion_tokens == plain.usage.completion_tokens  # type: ignore[union-attr]


def test_a_stream_with_the_mcp_tools_shown_ends_with_one_finish_and_no_call_markup(
    client: openai.OpenAI,
) -> None:
    """With tools in the prompt the random model may write anything, a call or not, and a
    sampled reply need not repeat between two requests (the engine's shared-prefix path
    differs), so this checks the stream's own shape: one finish reason, and no call markup
    shown as prose unless the reply's own answer carries it (a malformed call stays text)."""
    text, finishes, traces = "", [], []
    for chunk in client.chat.completions.create(
        model="toolrl",
        messages=QUESTION,  # type: ignore[arg-type]
        stream=True,
        **SEEDED,
    ):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
        if (chunk.model_extra or {}).get("toolrl", {}).get("turns"):
            traces.append(chunk.model_extra["toolrl"])  # type: ignore[index]
    assert len(finishes) == 1 and finishes[0] in {"stop", "length", "tool_calls"}
    assert len(traces) == 1, "the finish chunk carries the trace once"
    if "<tool_call>" in text:
        assert text.rstrip().endswith(("</tool_call>", "}", '"')) or finishes == ["length"]
