"""Run the loop through the compose stack that `stack_up.py --compose` brought up, and time it.

    python3 benchmarks/stack_loop.py [--stop-worker-at sft/global_step_200] [--timeout-min 60]

What it does, through Airflow's REST API on 127.0.0.1:8080 (the admin password is read from
the api-server container, where Airflow generated it):
1. unpauses `toolcall_dataset` and `toolcall_retraining`, and follows the dataset run the
   scheduler starts for the latest interval (or triggers one when none comes in 30 s);
2. waits for the retraining run the scheduler starts from the dataset's Asset event;
3. with `--stop-worker-at PATH`: once PATH exists under the run's checkpoint directory on
   the shared `toolrl-runs` volume (seen from the Ray worker), `docker stop`s the Ray worker
   container mid-training and starts it again; when `wait_training` then fails (the job's
   driver died with the node), clears `submit_training` with its downstream tasks, as an
   operator would: the next attempt resumes from the last complete checkpoint;
4. records every run's state, and each task's state, tries and duration.
The figures go to benchmarks/results/stack.json under "loop" (the other keys stay).
Use `TOOLRL_TRAINING_SPEC=training/specs/cpu_tiny.yaml` in the stack's .env for a short run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from training.ops.airflow.rest import AirflowApi, AirflowApiError  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "stack.json"
PROJECT = "toolrl"
DATASET, RETRAINING = "toolcall_dataset", "toolcall_retraining"
FINISHED = ("success", "failed")
PASSWORDS = "/opt/airflow/simple_auth_manager_passwords.json.generated"


def container(service: str) -> str:
    """The compose container of `service` (docker-compose 1.29 names: toolrl_<service>_1)."""
    return f"{PROJECT}_{service}_1"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], check=check, text=True, capture_output=True)


def admin_password() -> str:
    raw = docker("exec", container("airflow-apiserver"), "cat", PASSWORDS).stdout
    return str(json.loads(raw)["admin"])


def run_record(api: AirflowApi, dag_id: str, run_id: str) -> dict[str, Any]:
    run = api.dag_run(dag_id, run_id)
    body = api.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances", limit=100)
    tasks = {
        ti["task_id"]: {
            "state": ti.get("state"),
            "tries": ti.get("try_number"),
            "duration_s": round(float(ti["duration"]), 1) if ti.get("duration") else None,
        }
        for ti in body.get("task_instances", [])
    }
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "run_type": run.get("run_type"),
        "state": run.get("state"),
        "start": run.get("start_date"),
        "end": run.get("end_date"),
        "tasks": tasks,
    }


def wait_finished(api: AirflowApi, dag_id: str, run_id: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        state = str(api.dag_run(dag_id, run_id).get("state"))
        tasks = api.task_states(dag_id, run_id)
        line = f"{dag_id} {state}: " + ", ".join(f"{t}={s}" for t, s in sorted(tasks.items()))
        if line != last:
            print(time.strftime("%H:%M:%S"), line, flush=True)
            last = line
        if state in FINISHED:
            return state
        time.sleep(5)
    return "timed out"


def scheduled_or_triggered(api: AirflowApi, wait_s: float = 30.0) -> str:
    """The dataset run to follow: unpausing a scheduled DAG makes Airflow start its latest
    interval's run (catchup off); a second, manual run would publish a second Asset event
    and queue a second retraining run behind the first. Triggered only when none came."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        runs = api.dag_runs(DATASET)
        if runs:
            return str(runs[-1]["dag_run_id"])
        time.sleep(2)
    return api.trigger(DATASET)


def newest_asset_run(api: AirflowApi, after: str, timeout_s: float) -> str:
    """The retraining run the scheduler started from an Asset event after `after`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for run in reversed(api.dag_runs(RETRAINING)):
            if run.get("run_type") == "asset_triggered" and str(run.get("run_after")) > after:
                return str(run["dag_run_id"])
        time.sleep(3)
    raise AirflowApiError(f"no asset-triggered {RETRAINING} run within {timeout_s:.0f}s")


def worker_sees(path_glob: str) -> bool:
    probe = f"ls -d /var/lib/toolrl/runs/pipeline/*/checkpoints/{path_glob} 2>/dev/null"
    return bool(docker("exec", container("ray-cpu-worker"), "sh", "-c", probe, check=False).stdout)


def resumed_from() -> Any:
    """What the resubmitted job's report says it resumed from (sft / grpo steps)."""
    probe = "cat $(ls -t /var/lib/toolrl/runs/pipeline/*/jobs/*-a2/cpu_report.json | head -n 1)"
    found = docker("exec", container("ray-cpu-worker"), "sh", "-c", probe, check=False).stdout
    try:
        return json.loads(found).get("resumed_from")
    except ValueError:
        return "no report of attempt 2"


def stop_worker_mid_training(api: AirflowApi, run_id: str, marker: str) -> dict[str, Any]:
    """Stop the Ray worker once `marker` (a checkpoint) exists, start it again, and time it."""
    while not worker_sees(marker):
        state = api.dag_run(RETRAINING, run_id).get("state")
        if state in FINISHED:
            return {"fault": "ray worker stop", "skipped": f"the run ended ({state}) first"}
        time.sleep(2)
    t0 = time.monotonic()
    docker("stop", "-t", "10", container("ray-cpu-worker"))
    stopped_s = time.monotonic() - t0
    time.sleep(10)
    docker("start", container("ray-cpu-worker"))
    return {
        "fault": f"docker stop -t 10 {container('ray-cpu-worker')} once checkpoints/{marker} "
        "existed, docker start 10 s later",
        "stop_command_s": round(stopped_s, 1),
        "restarted_at": time.strftime("%H:%M:%S"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stop-worker-at", metavar="CHECKPOINT", help="e.g. sft/global_step_200")
    parser.add_argument("--timeout-min", type=float, default=60.0)
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    t0 = time.monotonic()
    with AirflowApi("http://127.0.0.1:8080", "admin", admin_password()) as api:
        api.wait_parsed([DATASET, RETRAINING], timeout_s=300)
        for dag_id in (DATASET, RETRAINING):
            api.set_paused(dag_id, False)
        dataset_run = scheduled_or_triggered(api)
        dataset_state = wait_finished(api, DATASET, dataset_run, 900)
        records = [run_record(api, DATASET, dataset_run)]
        fault: dict[str, Any] | None = None
        if dataset_state == "success":
            retraining_run = newest_asset_run(api, started, 300)
            if args.stop_worker_at:
                fault = stop_worker_mid_training(api, retraining_run, args.stop_worker_at)
                print(json.dumps(fault), flush=True)
            state = wait_finished(api, RETRAINING, retraining_run, args.timeout_min * 60)
            if fault and "skipped" not in fault and state == "failed":
                first = run_record(api, RETRAINING, retraining_run)
                fault["first_try"] = {t: v["state"] for t, v in first["tasks"].items()}
                fault["cleared_at"] = time.strftime("%H:%M:%S")
                api.clear_task(RETRAINING, retraining_run, "submit_training")
                state = wait_finished(api, RETRAINING, retraining_run, args.timeout_min * 60)
                fault["resumed_from"] = resumed_from()
            records.append(run_record(api, RETRAINING, retraining_run))
    loop = {
        "measured_at_utc": started + "Z",
        "seconds": round(time.monotonic() - t0, 1),
        "runs": records,
        **({"fault": fault} if fault else {}),
    }
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data["loop"] = loop
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(loop, indent=2))
    return 0 if all(r["state"] == "success" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
