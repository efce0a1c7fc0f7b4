"""Both DAGs end to end with `dag.test()` against real local services (MLflow server, Ray head
with the Jobs API, MCP server in mock mode), a tiny model trained on CPU as a Ray job, and
the champion served behind the front door (real-mode MCP tools), called with the openai client.

Asserts what the demo promises: the dataset Asset event, the registry state and aliases, a
served answer; then a candidate that fails the gate is registered as rejected and leaves
`champion` where it was."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
import yaml

from serving.runtime.ports import free_port
from testkit.airflow_env import migrate
from testkit.pipeline_specs import lenient_thresholds, tiny_spec
from testkit.ray_head import RayHead
from training.ops.demo.run import mcp_service, mlflow_service
from training.ops.demo.services import ManagedService

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]
BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
MODEL = "toolrl-e2e"

TINY_SPEC = tiny_spec("e2e-tiny")
LENIENT = lenient_thresholds()
IMPOSSIBLE = {
    **LENIENT,
    "absolute": {
        "overall.tool_selection_accuracy": {"min": 1.0},
        "overall.pass_rate": {"min": 1.0},
    },
}


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, ray_cluster: RayHead
) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("e2e")
    ports = {"mlflow": free_port(), "mcp": free_port(), "mcp_real": free_port()}
    mlflow_url = f"http://127.0.0.1:{ports['mlflow']}"
    mcp_url = f"http://127.0.0.1:{ports['mcp']}/mcp"
    services = [
        mlflow_service(root, ports["mlflow"], root / "mlflow.log", {}),
        mcp_service("mock", ports["mcp"], root / "mcp.log", {}),
        mcp_service("real", ports["mcp_real"], root / "mcp-real.log", {}),
    ]
    started: list[ManagedService] = []
    try:
        for service in services:
            service.start()
            started.append(service)
        (root / "spec.yaml").write_text(yaml.safe_dump(TINY_SPEC))
        (root / "lenient.yaml").write_text(yaml.safe_dump(LENIENT))
        (root / "impossible.yaml").write_text(yaml.safe_dump(IMPOSSIBLE))
        (root / "pipeline.yaml").write_text(
            yaml.safe_dump(
                {
                    "dataset_rows": 120,
                    "data_root": str(root / "datasets"),
                    "workdir": str(root / "pipeline"),
                    "training_spec": str(root / "spec.yaml"),
                    "training_backend": "cpu",
                    "thresholds": str(root / "lenient.yaml"),
                }
            )
        )
        with pytest.MonkeyPatch.context() as patch:
            for key, value in {
                "AIRFLOW_CONN_TOOLRL_RAY": ray_cluster.connection_uri,
                "AIRFLOW_CONN_TOOLRL_MLFLOW": mlflow_url,
                "AIRFLOW_CONN_TOOLRL_MCP": mcp_url,
                "MLFLOW_TRACKING_URI": mlflow_url,
                "TOOLRL_MCP_URL": mcp_url,
                "TOOLRL_MODEL_NAME": MODEL,
                "TOOLRL_PIPELINE_CONFIG": str(root / "pipeline.yaml"),
            }.items():
                patch.setenv(key, value)
            migrate()
            yield {"root": root, "mlflow": mlflow_url, "ports": ports}
    finally:
        for service in reversed(started):
            service.stop()


def run_dag(dag_id: str, conf: dict[str, Any] | None = None) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(REPO / "dags")).get_dag(dag_id)
    return dag.test(run_conf=conf or {})


def registry_versions(tracking_uri: str) -> dict[str, dict[str, Any]]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    found = client.search_model_versions(f"name='{MODEL}'")
    versions = [client.get_model_version(MODEL, v.version) for v in found]  # search omits aliases
    return {v.version: {"aliases": set(v.aliases), "tags": dict(v.tags)} for v in versions}


def test_pipeline_trains_gates_registers_serves_and_protects_the_champion(
    stack: dict[str, Any],
) -> None:
    dataset_run = run_dag("toolcall_dataset", {"rows": 120})
    assert str(dataset_run.state) == "success"
    dataset_dir = next(
        p for p in (stack["root"] / "datasets").iterdir() if (p / "manifest.json").is_file()
    )

    conf = {"dataset_dir": str(dataset_dir), "backend": "cpu", "eval_limit": 3}
    first = run_dag("toolcall_retraining", conf)
    assert str(first.state) == "success"
    versions = registry_versions(stack["mlflow"])
    [(version, info)] = versions.items()
    assert "champion" in info["aliases"]
    assert info["tags"]["toolrl.dataset_version"] == dataset_dir.name
    assert info["tags"]["toolrl.gate_decision"] == "promote"

    second = run_dag(
        "toolcall_retraining", {**conf, "thresholds": str(stack["root"] / "impossible.yaml")}
    )
    assert str(second.state) == "success"  # a rejection is a successful run of the gate
    versions = registry_versions(stack["mlflow"])
    assert len(versions) == 2
    rejected = next(v for k, v in versions.items() if k != version)
    assert rejected["tags"]["toolrl.gate_decision"] == "reject"
    assert "champion" not in rejected["aliases"]
    assert "champion" in versions[version]["aliases"]

    port = free_port()
    serving = ManagedService(
        "serving",
        [
            str(BIN / "toolrl"),
            "serve",
            "--backend",
            "transformers",
            "--port",
            str(port),
            "--watch-interval",
            "0",
            "--max-tokens",
            "64",
            "--cache-dir",
            str(stack["root"] / "serving"),
        ],
        f"http://127.0.0.1:{port}/health",
        stack["root"] / "serving.log",
        {"TOOLRL_MCP_URL": f"http://127.0.0.1:{stack['ports']['mcp_real']}/mcp"},
        start_timeout_s=300,
    )
    serving.start()
    try:
        from openai import OpenAI

        reply = OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="x", timeout=120
        ).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "What's the weather in Paris?"}]
        )
        body = json.loads(reply.model_dump_json())
        health = json.loads(urlopen(f"http://127.0.0.1:{port}/health", timeout=10).read())
    finally:
        serving.stop()
    # What is served is the version the registry calls champion, and the answer carries the
    # front door's trace of the episode. The tiny model trained for 4 steps does not call
    # tools; that the champion's call reaches the real tool and its result reaches the
    # answer is checked by `make demo` on SmolLM2 (training/ops/demo/report.answer_check) and by
    # tests/integration/test_serving_frontdoor_scripted.py with a scripted upstream.
    assert body["toolrl"]["model_version"] == version
    assert health["model_version"] == version
    assert body["model"] == MODEL
    assert body["toolrl"]["turns"] >= 1
    assert body["toolrl"]["stop"] in {"answer", "max_turns"}  # not "error": the episode ran
    assert body["choices"][0]["message"]["role"] == "assistant"
