"""The retraining loop on a task pack, at small scale, through the stages the DAGs wire, for
both third-party servers: the pack's dataset generated against the real `mcp-server-time`
(PyPI) or `@modelcontextprotocol/server-memory` (npm), both stdio, and validated
with the project's suite, then the tiny model trained on CPU against the project's MCP server
in replay mode over that dataset's store, evaluated on the held-out split (replay again),
gated and registered with the tool mode and the store digest as lineage tags.

The proof that training and evaluation never touch the user's server: the server is started
through a wrapper that appends a line to a log every time a process of it starts (a stdio
server starts with every client that reaches it), and that log does not grow after
generation. The proof that they do reach the replay: the training report names the embedded
server's mode and digest and the tools it listed, and an oracle model (a scripted server
answering each case with its recorded calls) scores every case exactly through it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.mcp_servers import MEMORY_SERVER_BIN
from testkit.pipeline_specs import lenient_thresholds, tiny_spec
from training.pipeline.config import PipelineConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TIME_WRAPPER = """import runpy, sys
with open(sys.argv[1], "a", encoding="utf-8") as log:
    log.write("started\\n")
sys.argv = ["mcp-server-time"]
runpy.run_module("mcp_server_time", run_name="__main__")
"""

MEMORY_WRAPPER = """import os, sys
with open(sys.argv[1], "a", encoding="utf-8") as log:
    log.write("started\\n")
os.execv(sys.argv[2], [sys.argv[2]])
"""


def _live_server_sources(root: Path, pack: str) -> tuple[Path, Path]:
    """Sources with the pack's server, started through a wrapper that counts its starts."""
    wrapper, log = root / f"{pack}_server.py", root / f"{pack}_server.starts"
    server: dict[str, Any] = {"command": sys.executable, "args": [str(wrapper), str(log)]}
    if pack == "time":
        wrapper.write_text(TIME_WRAPPER, encoding="utf-8")
    else:
        if shutil.which("node") is None:
            pytest.skip("node is not installed: the npm MCP server cannot run")
        assert MEMORY_SERVER_BIN.exists(), "run `make mcp-servers` (installs server-memory)"
        wrapper.write_text(MEMORY_WRAPPER, encoding="utf-8")
        server["args"].append(str(MEMORY_SERVER_BIN))
        server["env"] = {"MEMORY_FILE_PATH": str(root / "graph.jsonl")}
    sources = root / "sources.yaml"
    sources.write_text(yaml.safe_dump({"servers": {pack: server}}), encoding="utf-8")
    return sources, log


def _starts(log: Path) -> int:
    return len(log.read_text(encoding="utf-8").splitlines()) if log.is_file() else 0


@pytest.mark.parametrize(
    ("pack", "evaluation_on"),
    [("time", "airflow"), ("memory", "ray")],
    ids=["time-evaluated-in-process", "memory-evaluated-as-a-ray-job"],
)
def test_the_loop_runs_on_a_third_party_pack_against_its_replay(
    pack: str,
    evaluation_on: str,
    tmp_path: Path,
    mlflow_server: str,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """The stages in DAG order on a pack. `memory` runs `evaluate` as the compose stack and
    Kubernetes do (`evaluation_runs_on: ray`): a Ray job on a real local head serves and
    scores the candidate, reading the run dir the stages wrote."""
    # the training run logs here, never to a server an earlier test left in the env
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    from training.cpu_backend.run import run_local
    from training.evaluation.report import load_report
    from training.evaluation.runner import EvalConfig, evaluate
    from training.evaluation.scripted import oracle_script, serve_in_thread, truths_from_parquet
    from training.pipeline.contracts import RunParams, TrainingResult
    from training.pipeline.dataset_stage import generate_stage, publish_stage, validate_stage
    from training.pipeline.gate_stage import (
        evaluate_candidate_and_champion,
        gate_candidate,
        register_candidate_version,
    )
    from training.pipeline.retraining_stage import (
        check_planned_tools,
        checked_version,
        planned_tools,
        prepare_spec,
    )
    from training.registry.registry import resolve
    from training.spec.model import load_spec

    monkeypatch.setenv("TOOLRL_MODEL_NAME", f"toolrl-pack-test-{pack}")
    sources, starts_log = _live_server_sources(tmp_path, pack)
    config = PipelineConfig(
        pack=pack,
        pack_sources=str(sources),
        dataset_rows=120,
        data_root=str(tmp_path / "datasets"),
        workdir=str(tmp_path / "pipeline"),
    )

    generated = generate_stage(config, "run-1")
    assert generated.pack == pack
    published = publish_stage(config, generated, validate_stage(config, generated))
    dataset_dir = Path(published.dataset_dir)
    manifest = json.loads((dataset_dir / "manifest.json").read_text())
    digest = manifest["call_store"]["digest"]
    assert generated.call_store_digest == digest
    live_starts = _starts(starts_log)
    assert live_starts >= 1  # generation ran the real server

    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(tiny_spec("pack-tiny")))  # says tools.mode mock
    thresholds = tmp_path / "lenient.yaml"
    thresholds.write_text(yaml.safe_dump(lenient_thresholds()))
    params = RunParams(spec=str(spec_file), thresholds=str(thresholds), backend="cpu", eval_limit=4)
    planned = prepare_spec(config, checked_version(dataset_dir), "run-1", params)
    assert planned.tool_mode == "replay"  # a pack dataset trains against its replay
    assert planned.tool_store_digest == digest
    spec = load_spec(Path(planned.spec_path))
    assert spec.tools.store == str((dataset_dir / "calls.sqlite").resolve())
    # the configured server is unreachable on purpose: replay checks its own server
    check_planned_tools("http://127.0.0.1:9/mcp", planned)

    result = TrainingResult.model_validate(run_local(spec, Path(planned.workdir) / "jobs"))
    assert result.status == "succeeded", result
    report = json.loads((Path(planned.workdir) / "jobs" / "cpu_report.json").read_text())
    assert report["tools"]["server"] == "embedded"
    assert report["tools"]["mode"] == "replay"
    assert report["tools"]["store_digest"] == digest
    served = json.loads((dataset_dir / "tools.json").read_text())
    assert report["tools"]["listed"] == sorted(tool["name"] for tool in served)
    assert len(served) >= 2

    if evaluation_on == "ray":
        from training.jobs.submit import connect
        from training.pipeline.evaluation_job import evaluate_on_ray

        head = request.getfixturevalue("ray_cluster")
        client = connect(head.address, head.token)
        evaluated = evaluate_on_ray(
            client, planned, result, "http://127.0.0.1:9/mcp", mlflow_server, poll_s=1.0
        )
        assert (Path(planned.workdir) / "eval" / "evaluation.json").is_file()
    else:
        evaluated = evaluate_candidate_and_champion(
            planned, result, "http://127.0.0.1:9/mcp", mlflow_server
        )
    candidate = load_report(Path(evaluated.candidate.path))
    assert candidate.cases_total == evaluated.candidate.cases_total == 4
    decision = gate_candidate(evaluated, result, planned.thresholds)
    assert decision.decision == "promote", decision
    registered = register_candidate_version(mlflow_server, planned, result, evaluated, "run-1")
    info = resolve(mlflow_server, f"models:/{registered.name}/{registered.version}")
    tags: dict[str, Any] = info.tags
    assert tags["toolrl.tool_mode"] == "replay"
    assert tags["toolrl.tool_store_digest"] == digest
    assert tags["toolrl.dataset_version"] == dataset_dir.name
    # two quick-eval rows decide nothing: GRPO's model, and the version says whose weights
    assert tags["toolrl.candidate_stage"] == result.candidate_stage == "grpo"

    # an oracle through the same replay scores every held-out tool case exactly, judged by
    # the dataset's tool snapshot (the built-in catalog has no convert_time)
    test_file = dataset_dir / "test.parquet"
    with (
        planned_tools(planned, "http://127.0.0.1:9/mcp") as tools_url,
        serve_in_thread(oracle_script(truths_from_parquet(test_file))) as upstream,
    ):
        oracle = evaluate(
            EvalConfig(
                endpoint=upstream,
                model="oracle",
                data=test_file,
                out=tmp_path / "oracle.json",
                mcp_url=tools_url,
                max_turns=4,
            ),
            progress=False,
        )
    overall = oracle.metrics["overall"]
    assert overall["tool_selection_accuracy"] == 1.0, overall
    assert overall["exact_call_accuracy"] == 1.0, overall

    assert _starts(starts_log) == live_starts  # training and evaluation never started it
