"""Benchmark: Airflow's own services on this machine, the figures issue 14 names.

- time from `toolrl airflow up` (the same `up()` the CLI calls) until all four services are
  healthy, and until both DAGs are parsed; target 60 s on 2 cores;
- the Asset-triggered start latency: from the Asset event a `toolcall_dataset` run (triggered
  over REST) emits to the start of the `toolcall_retraining` run the scheduler creates for
  it; target 30 s;
- "database is locked" lines in every service and task log (SQLite holding under four
  services is a claim; this counts it).

A noise reference is measured in the same script: a cold `airflow version` (the interpreter
and Airflow import every service pays at start), so the start figure can be read as a ratio.
The retraining run it starts is dry (plan and validate only) and then stopped.

Prints the figures and writes benchmarks/results/airflow_services.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results" / "airflow_services.json"

from serving.runtime.ports import free_port  # noqa: E402
from training.ops.airflow.follow import follow_run, wait_for_run  # noqa: E402
from training.ops.airflow.layout import AirflowLayout, AirflowPorts, read_login  # noqa: E402
from training.ops.airflow.rest import AirflowApi  # noqa: E402
from training.ops.airflow.services import stop, up  # noqa: E402
from training.ops.demo.airflow_run import start_latency  # noqa: E402
from training.pipeline.config import load_pipeline_config  # noqa: E402


def cold_airflow_version() -> float:
    started = time.monotonic()
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "version"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return time.monotonic() - started


def locked_lines(root: Path) -> int:
    count = 0
    for log in root.rglob("*.log"):
        count += log.read_text(errors="replace").count("database is locked")
    return count


def one_round(root: Path, rows: int) -> dict[str, float]:
    import yaml

    config_path = root / "pipeline.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "dataset_schedule": None,
                "dataset_rows": rows,
                "data_root": str(root / "datasets"),
                "workdir": str(root / "pipeline"),
            }
        )
    )
    config = load_pipeline_config({"TOOLRL_PIPELINE_CONFIG": str(config_path)})
    layout = AirflowLayout(root)
    started = time.monotonic()
    result = up(layout, AirflowPorts(free_port(), free_port(), free_port()), config, config_path)
    healthy = time.monotonic() - started
    try:
        user, password = read_login(layout)
        with AirflowApi(result.deployment.api_url, user, password) as api:
            api.wait_parsed(["toolcall_dataset", "toolcall_retraining"])
            parsed = time.monotonic() - started
            api.set_paused("toolcall_retraining", False)
            api.set_paused("toolcall_dataset", False)
            run_id = api.trigger("toolcall_dataset", {"rows": rows})
            dataset = follow_run(api, layout, "toolcall_dataset", run_id, lambda _: None, 600)
            if dataset.state != "success":
                raise RuntimeError(f"the dataset run ended {dataset.state}; logs in {layout.logs}")
            retraining = wait_for_run(
                api, "toolcall_retraining", lambda r: r["run_type"] == "asset_triggered", 300
            )
            events = api.upstream_asset_events("toolcall_retraining", retraining["dag_run_id"])
            latency = start_latency(
                events, api.dag_run("toolcall_retraining", retraining["dag_run_id"])
            )
            api.set_paused("toolcall_retraining", True)
    finally:
        stop(layout)
    return {
        "seconds_to_healthy": round(healthy, 2),
        "seconds_to_dags_parsed": round(parsed, 2),
        "dataset_run_seconds": round(dataset.seconds, 2),
        "asset_start_latency_s": round(latency, 2),
        "database_locked_lines": locked_lines(root),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows", type=int, default=200)
    args = parser.parse_args()
    reference = cold_airflow_version()
    rounds = []
    for index in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="toolrl-bench-airflow-") as tmp:
            figures = one_round(Path(tmp), args.rows)
        figures["healthy_over_cold_airflow_version"] = round(
            figures["seconds_to_healthy"] / reference, 2
        )
        rounds.append(figures)
        print(f"round {index + 1}: {json.dumps(figures)}", flush=True)
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "cold_airflow_version_s": round(reference, 2),
        "rows": args.rows,
        "rounds": rounds,
        "targets": {"seconds_to_healthy": 60, "asset_start_latency_s": 30},
        "worst": {
            "seconds_to_healthy": max(r["seconds_to_healthy"] for r in rounds),
            "asset_start_latency_s": max(r["asset_start_latency_s"] for r in rounds),
            "database_locked_lines": sum(int(r["database_locked_lines"]) for r in rounds),
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["worst"]), f"-> {RESULTS}")


if __name__ == "__main__":
    main()
