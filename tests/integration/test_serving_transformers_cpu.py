"""`toolrl serve` on CPU for real: the tiny Qwen3 registered in a real MLflow server, served
by `transformers serve`, behind the front door (openai client), evaluated by the harness,
and replaced blue/green when a new champion is promoted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from serving.agent import EndpointBackend
from serving.frontdoor.app import FrontDoorConfig
from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import RunningServer, start
from serving.serve import ServeConfig, ServingStack
from training.data.packs.generate import generate_builtin_dataset
from training.evaluation.runner import EvalConfig, evaluate
from training.model.tiny import TinyModelConfig, build_tiny_model
from training.registry.registry import Lineage, promote, register_candidate

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]
NAME = "toolrl-serving-cpu"


def tiny(root: Path, seed: int) -> Path:
    shape = TinyModelConfig(hidden_size=64, num_layers=2, intermediate_size=128, seed=seed)
    return build_tiny_model(root / f"tiny-{seed}", shape)


def register(uri: str, model_dir: Path, key: str) -> str:
    lineage = Lineage(run_key=key, dataset_version="v", call_format="hermes")
    version = register_candidate(uri, NAME, model_dir, lineage).version
    promote(uri, NAME, version)
    return version


@pytest.fixture(scope="module")
def mcp() -> Iterator[RunningServer]:
    with start(ServerConfig(port=0, workers=1, log_level="warning")) as running:
        yield running


class Running:
    def __init__(self, config: ServeConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.stack = ServingStack(config)
        self.url = self.call(self.stack.start(), 300)

    def call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def health(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url.removesuffix("/v1") + "/health", timeout=5) as r:
            result: dict[str, Any] = json.loads(r.read())
            return result

    def close(self) -> None:
        self.call(self.stack.stop(), 120)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_cpu_serving_frontdoor_eval_and_reload_on_promotion(
    mlflow_server: str, mcp: RunningServer, tmp_path: Path
) -> None:
    v1 = register(mlflow_server, tiny(tmp_path, 1), "cpu-1")
    config = ServeConfig(
        model_uri=f"models:/{NAME}@champion",
        tracking_uri=mlflow_server,
        backend="transformers",
        frontdoor=FrontDoorConfig(port=0, model_name=NAME),
        mcp_url=mcp.url,
        cache_dir=tmp_path / "cache",
        log_dir=tmp_path / "logs",
        watch_interval_s=1.0,
        max_tokens=16,
        max_turns=2,
        start_timeout_s=240,
    )
    running = Running(config)
    try:
        assert running.health()["model_version"] == v1
        client = openai.OpenAI(base_url=running.url, api_key="x", max_retries=0)
        reply = client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "What time is it in Tokyo?"}]
        )
        assert isinstance(reply.choices[0].message.content, str)
        assert (reply.model_extra or {})["toolrl"]["model_version"] == v1

        # the harness against the real CPU server (untrained model: scores low, no errors)
        switchboard = running.stack.switchboard
        assert switchboard is not None
        backend = switchboard.current.agent.backend
        assert isinstance(backend, EndpointBackend)  # the front door calls an endpoint
        chat = backend.chat
        generate_builtin_dataset(tmp_path / "d", n=100, seed=2, progress=False)
        report = evaluate(
            EvalConfig(endpoint=chat.base_url, model=chat.model, data=tmp_path / "d/test.parquet",
                       out=tmp_path / "eval/report.json", mcp_url=mcp.url, limit=3,
                       max_tokens=16, max_turns=2, concurrency=2),
            progress=False,
        )  # fmt: skip
        assert report.metrics["overall"]["cases"] == 3
        assert report.metrics["overall"]["error_rate"] == 0.0

        old_log = next((tmp_path / "logs").glob("transformers-*.log"))
        v2 = register(mlflow_server, tiny(tmp_path, 2), "cpu-2")
        failures: list[str] = []
        deadline = time.time() + 240
        while running.health()["model_version"] != v2 and time.time() < deadline:
            try:
                client.chat.completions.create(
                    model=NAME, messages=[{"role": "user", "content": "hi"}]
                )
            except Exception as exc:
                failures.append(repr(exc))
            time.sleep(0.2)
        assert running.health()["model_version"] == v2
        assert failures == []
        reply = client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "hi"}]
        )
        assert (reply.model_extra or {})["toolrl"]["model_version"] == v2
        time.sleep(2)
        port = old_log.stem.split("-")[-1]
        with pytest.raises(OSError):  # the old backend is gone
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        running.close()


def test_toolrl_serve_command_serves_and_stops_its_backend_on_sigterm(
    mlflow_server: str, tmp_path: Path
) -> None:
    """Also: the MCP bearer token reaches the tool server from TOOLRL_MCP_TOKEN (the tool
    list is fetched on the first chat; a wrong or missing token would make it a 502)."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    version = register(mlflow_server, tiny(tmp_path, 3), "cli-1")
    token = "mcp-secret-token"
    mcp_config = ServerConfig(port=0, workers=1, log_level="warning", token=token)
    stack = contextlib.ExitStack()
    mcp = stack.enter_context(start(mcp_config))
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_server, "TOOLRL_MCP_URL": mcp.url,
           "TOOLRL_MODEL_NAME": NAME, "TOOLRL_MCP_TOKEN": token}  # fmt: skip
    script = (
        "import typer; from training.registry.cli import register_cli; "
        "app = typer.Typer(); register_cli(app); app()"
    )
    command = [sys.executable, "-c", script, "serve", "--backend", "transformers",
               "--port", str(port), "--max-tokens", "8", "--watch-interval", "0",
               "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                    assert json.loads(reply.read())["model_version"] == version
                    break
            except OSError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                time.sleep(0.5)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        hello = [{"role": "user", "content": "hi"}]
        reply = client.chat.completions.create(model=NAME, messages=hello)  # type: ignore[arg-type]
        assert (reply.model_extra or {})["toolrl"]["model_version"] == version
        backend_logs = list((tmp_path / "logs").glob("transformers-*.log"))
        backend_port = backend_logs[0].stem.split("-")[-1]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        stack.close()
    with pytest.raises(OSError):  # the backend went down with it
        urllib.request.urlopen(f"http://127.0.0.1:{backend_port}/health", timeout=2)
