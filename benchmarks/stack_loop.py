"""Run the loop through the compose stack that `stack_up.py --compose` brought up, inject
faults into it, serve the champion with the CPU engine, and time it all.

    .venv/bin/python benchmarks/stack_loop.py --env-file /var/tmp/toolrl.env \\
        [--stop-worker-at sft/global_step_200] [--restart-postgres] [--restart-scheduler] \\
        [--serve] [--timeout-min 60]

What it does, through Airflow's REST API on 127.0.0.1:8080 (the admin password is read from
the api-server container, where Airflow generated it):
1. unpauses `toolcall_dataset` and `toolcall_retraining`, and follows the dataset run the
   scheduler starts for the latest interval (or triggers one when none comes in 30 s);
2. waits for the retraining run the scheduler starts from the dataset's Asset event;
3. faults during that run, in this order, each timed to recovery:
   `--restart-postgres`: `docker restart` of Postgres (Airflow's and MLflow's database) once
   training is under way; `--restart-scheduler`: `docker restart` of the Airflow scheduler;
   `--stop-worker-at PATH`: once PATH exists under the run's checkpoint directory on the
   shared `toolrl-runs` volume, `docker stop`s the Ray worker container mid-training and
   starts it again; when `wait_training` then fails (the job's driver died with the node),
   clears `submit_training` with its downstream tasks, as an operator would: the next
   attempt resumes from the last complete checkpoint;
4. records every run's state, and each task's state, tries and duration;
5. `--serve`: brings up the `serving-cpu` profile (the champion on the CPU engine behind the
   front door, real MCP tools), times it to healthy and asks it the demo question.
The figures go to benchmarks/results/stack.json under "loop" and "serving" (other keys stay).
Use `TOOLRL_TRAINING_SPEC=training/specs/cpu_tiny.yaml` in the stack's .env for a short run.
`benchmarks/stack_run.py` runs this after building the images and bringing the stack up.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))  # benchmark scripts are files, not a package

from stack_up import compose_cmd, save  # noqa: E402

from training.ops.airflow.rest import AirflowApi, AirflowApiError  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "stack.json"
PROJECT = "toolrl"
DATASET, RETRAINING = "toolcall_dataset", "toolcall_retraining"
FINISHED = ("success", "failed")
PASSWORDS = "/opt/airflow/simple_auth_manager_passwords.json.generated"
AIRFLOW_URL = "http://127.0.0.1:8080"
SERVING_URL = "http://127.0.0.1:8300"  # compose_hostnet.py's SERVING_PORT
#: how long training runs before the first fault: the job is past its start-up and writing
#: checkpoints and MLflow metrics when the database goes away
FAULT_AFTER_S = 90.0


def container(service: str) -> str:
    """The compose container of `service` (docker-compose 1.29 names: toolrl_<service>_1)."""
    return f"{PROJECT}_{service}_1"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], check=check, text=True, capture_output=True)


def admin_password() -> str:
    raw = docker("exec", container("airflow-apiserver"), "cat", PASSWORDS).stdout
    return str(json.loads(raw)["admin"])


def env_value(env_file: Path, key: str) -> str:
    for line in env_file.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and name == key:
            return value
    raise SystemExit(f"{env_file} has no {key}")


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
        try:
            state = str(api.dag_run(dag_id, run_id).get("state"))
            tasks = api.task_states(dag_id, run_id)
        except (AirflowApiError, OSError) as exc:  # the API server restarting under a fault
            print(time.strftime("%H:%M:%S"), f"Airflow API not answering ({exc}); retrying")
            time.sleep(5)
            continue
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


def health(service: str) -> str:
    """The container's health status (healthy, starting, unhealthy; "" without a check)."""
    fmt = "{{if .State.Health}}{{.State.Health.Status}}{{end}}"
    return docker("inspect", "-f", fmt, container(service), check=False).stdout.strip()


def seconds_until(check: Callable[[], bool], timeout_s: float = 300.0) -> float | None:
    """Seconds until `check` holds (polled every 0.5 s), None if it never did."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            if check():
                return round(time.monotonic() - t0, 1)
        except OSError:
            pass
        time.sleep(0.5)
    return None


def answers(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=3) as reply:
        return bool(reply.status == 200)


def training_started(api: AirflowApi, run_id: str) -> bool:
    """True once `wait_training` is waiting on the job (the job runs on Ray)."""
    return api.task_states(RETRAINING, run_id).get("wait_training") in ("deferred", "running")


def restart_postgres(api: AirflowApi, run_id: str) -> dict[str, Any]:
    """`docker restart` Postgres while the job trains (it logs to MLflow, whose store is
    this database, and Airflow's roles hold connections to it)."""
    before = api.task_states(RETRAINING, run_id)
    t0 = time.monotonic()
    docker("restart", "-t", "10", container("postgres"))
    restart_s = round(time.monotonic() - t0, 1)
    accepting = seconds_until(
        lambda: (
            docker(
                "exec", container("postgres"), "pg_isready", "-h", "127.0.0.1", check=False
            ).returncode
            == 0
        )
    )
    return {
        "fault": f"docker restart -t 10 {container('postgres')} while wait_training was "
        f"{before.get('wait_training')} (the job training on the Ray worker)",
        "restart_command_s": restart_s,
        "postgres_accepting_again_s": accepting,
        "airflow_api_healthy_again_s": seconds_until(
            lambda: answers(f"{AIRFLOW_URL}/api/v2/monitor/health")
        ),
        "mlflow_answers_again_s": seconds_until(lambda: answers("http://127.0.0.1:5000/health")),
        "at": time.strftime("%H:%M:%S"),
    }


def restart_scheduler(api: AirflowApi, run_id: str) -> dict[str, Any]:
    """`docker restart` the Airflow scheduler mid-run: the deferred wait lives in the
    triggerer, the scheduler must pick the run up again where it left it."""
    before = api.task_states(RETRAINING, run_id)
    t0 = time.monotonic()
    docker("restart", "-t", "30", container("airflow-scheduler"))
    restart_s = round(time.monotonic() - t0, 1)
    return {
        "fault": f"docker restart -t 30 {container('airflow-scheduler')} while wait_training "
        f"was {before.get('wait_training')}",
        "restart_command_s": restart_s,
        "scheduler_healthy_again_s": seconds_until(
            lambda: health("airflow-scheduler") == "healthy", 300
        ),
        "at": time.strftime("%H:%M:%S"),
    }


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


def wait_for(check: Callable[[], bool], what: str, timeout_s: float) -> None:
    if seconds_until(check, timeout_s) is None:
        raise AirflowApiError(f"{what} did not happen within {timeout_s:.0f}s")


def run_loop(
    *,
    stop_worker_at: str | None,
    postgres_fault: bool,
    scheduler_fault: bool,
    timeout_min: float,
) -> dict[str, Any]:
    """The dataset run, the retraining run it triggers and the faults asked for."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    t0 = time.monotonic()
    faults: list[dict[str, Any]] = []
    with AirflowApi(AIRFLOW_URL, "admin", admin_password()) as api:
        api.wait_parsed([DATASET, RETRAINING], timeout_s=300)
        for dag_id in (DATASET, RETRAINING):
            api.set_paused(dag_id, False)
        dataset_run = scheduled_or_triggered(api)
        dataset_state = wait_finished(api, DATASET, dataset_run, 900)
        records = [run_record(api, DATASET, dataset_run)]
        worker_fault: dict[str, Any] | None = None
        gate: dict[str, Any] = {"error": "no retraining run"}
        if dataset_state == "success":
            retraining_run = newest_asset_run(api, started, 300)
            if postgres_fault or scheduler_fault:
                wait_for(lambda: training_started(api, retraining_run), "training start", 600)
                time.sleep(FAULT_AFTER_S)
            if postgres_fault:
                faults.append(restart_postgres(api, retraining_run))
                print(json.dumps(faults[-1]), flush=True)
            if scheduler_fault:
                faults.append(restart_scheduler(api, retraining_run))
                print(json.dumps(faults[-1]), flush=True)
            if stop_worker_at:
                worker_fault = stop_worker_mid_training(api, retraining_run, stop_worker_at)
                faults.append(worker_fault)
                print(json.dumps(worker_fault), flush=True)
            state = wait_finished(api, RETRAINING, retraining_run, timeout_min * 60)
            if worker_fault and "skipped" not in worker_fault and state == "failed":
                first = run_record(api, RETRAINING, retraining_run)
                worker_fault["first_try"] = {t: v["state"] for t, v in first["tasks"].items()}
                worker_fault["cleared_at"] = time.strftime("%H:%M:%S")
                api.clear_task(RETRAINING, retraining_run, "submit_training")
                state = wait_finished(api, RETRAINING, retraining_run, timeout_min * 60)
                worker_fault["resumed_from"] = resumed_from()
            records.append(run_record(api, RETRAINING, retraining_run))
            gate = gate_record(api, retraining_run)
    return {
        "measured_at_utc": started + "Z",
        "seconds": round(time.monotonic() - t0, 1),
        "runs": records,
        "faults": faults,
        "gate": gate,
        "tasks_not_done_on_first_try": not_first_try(records),
    }


#: The candidate figures the gate's thresholds name (training/specs/thresholds_demo.yaml).
GATE_FIGURES = (
    "pass_rate",
    "tool_selection_accuracy",
    "exact_call_accuracy",
    "parseable_rate",
    "malformed_call_rate",
    "abstention_rate",
)


def gate_record(api: AirflowApi, run_id: str) -> dict[str, Any]:
    """What the gate decided and on what: the verdict with its reasons, and the candidate's
    headline figures with the case count (the `evaluate` and `gate` tasks' XComs)."""
    from training.pipeline.contracts import Evaluation, GateVerdict

    try:
        verdict = GateVerdict.model_validate(api.xcom(RETRAINING, run_id, "gate"))
        evaluated = Evaluation.model_validate(api.xcom(RETRAINING, run_id, "evaluate"))
    except (AirflowApiError, ValueError) as exc:  # the run stopped before the gate
        return {"error": str(exc)[:300]}
    candidate = evaluated.candidate
    return {
        "decision": verdict.decision,
        "reasons": list(verdict.reasons),
        "cases": candidate.cases_total,
        "candidate": {k: round(v, 4) for k, v in candidate.overall.items() if k in GATE_FIGURES},
    }


def not_first_try(records: list[dict[str, Any]]) -> list[str]:
    """What the faults cost: every task that did not succeed, or needed more than one try."""
    found = []
    for record in records:
        for task, info in record["tasks"].items():
            if info["state"] not in ("success", "skipped") or (info["tries"] or 0) > 1:
                found.append(f"{record['dag_id']}.{task}: {info['state']}, try {info['tries']}")
    return found


def registry(env_file: Path, path: str, **params: str) -> tuple[int, dict[str, Any]]:
    """GET MLflow's REST API as the serving identity (read only): status and JSON body."""
    import base64
    import urllib.error
    import urllib.parse

    password = env_value(env_file, "MLFLOW_SERVING_PASSWORD")
    auth = base64.b64encode(f"toolrl-serving:{password}".encode()).decode()
    url = f"http://127.0.0.1:5000/api/2.0/mlflow/{path}?{urllib.parse.urlencode(params)}"
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status), json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read() or b"{}")


def model_to_serve(env_file: Path) -> tuple[str, str]:
    """(model URI, why): the champion; when the gate promoted none (a smoke run's tiny model
    rarely passes the pipeline's thresholds), the newest registered version, said so, as an
    operator serves a version to try the endpoint."""
    name = env_value(env_file, "TOOLRL_MODEL_NAME") or "toolrl-tool-caller"
    status, _ = registry(env_file, "registered-models/alias", name=name, alias="champion")
    if status == 200:
        return f"models:/{name}@champion", "the champion"
    status, body = registry(env_file, "model-versions/search", filter=f"name='{name}'")
    versions = sorted(int(v["version"]) for v in body.get("model_versions", []))
    if status != 200 or not versions:
        raise SystemExit(f"nothing registered under {name}: the loop registered no candidate")
    return (
        f"models:/{name}/{versions[-1]}",
        f"no champion (the gate promoted no candidate): version {versions[-1]}, the newest "
        "registered candidate",
    )


def status_without_key(url: str) -> int:
    """What the front door answers a chat request that carries no API key (401 expected)."""
    import urllib.error

    body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def serve_and_ask(env_file: Path, timeout_s: float = 900) -> dict[str, Any]:
    """The `serving-cpu` profile: the champion from MLflow on the CPU engine behind the front
    door with mcp-real's tools; time to healthy, then the demo question as a user asks it.
    Without a champion the service's own command serves the newest registered version
    (`docker-compose run`, every other flag as the service has it)."""
    import yaml
    from stack_up import GENERATED

    from training.ops.demo.common import DEMO_QUESTION
    from training.ops.demo.report import answer_check
    from training.ops.demo.run import ask_front_door

    dc = [*compose_cmd(env_file), "--profile", "serving-cpu"]
    uri, why = model_to_serve(env_file)
    subprocess.run([*dc, "rm", "-sf", "serving-cpu"], check=False, capture_output=True)
    t0 = time.monotonic()
    if uri.endswith("@champion"):
        subprocess.run([*dc, "up", "-d", "--no-build", "serving-cpu"], check=True)
    else:
        command = list(yaml.safe_load(GENERATED.read_text())["services"]["serving-cpu"]["command"])
        command[command.index("--model-uri") + 1] = uri
        run = ["run", "-d", "--no-deps", "--name", container("serving-cpu"), "serving-cpu"]
        subprocess.run([*dc, *run, *command], check=True)
    healthy_s = seconds_until(lambda: answers(f"{SERVING_URL}/health"), timeout_s)
    result: dict[str, Any] = {
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "service": "serving-cpu (toolrl serve --backend cpu, profile serving-cpu)",
        "model_uri": uri,
        "why_this_model": why,
        "time_to_healthy_s": healthy_s if healthy_s is None else round(time.monotonic() - t0, 1),
    }
    if healthy_s is None:
        logs = docker("logs", "--tail", "30", container("serving-cpu"), check=False)
        result["log_tail"] = (logs.stdout + logs.stderr)[-3000:]
        return result
    result["without_api_key_status"] = status_without_key(f"{SERVING_URL}/v1/chat/completions")
    t1 = time.monotonic()
    answer = ask_front_door(
        f"{SERVING_URL}/v1",
        env_value(env_file, "TOOLRL_FRONTDOOR_API_KEY"),
        DEMO_QUESTION,
        env_value(env_file, "TOOLRL_MODEL_NAME") or "toolrl-tool-caller",
    )
    ok, check = answer_check(answer)
    extension = answer.get("toolrl") if isinstance(answer.get("toolrl"), dict) else {}
    message = (answer.get("choices") or [{}])[0].get("message") or {}
    result.update(
        {
            "question": DEMO_QUESTION,
            "chat_s": round(time.monotonic() - t1, 1),
            "tool_calls": [
                {"name": c.get("name"), "arguments": c.get("arguments")}
                for c in (extension or {}).get("tool_calls") or []
                if isinstance(c, dict)
            ],
            "reply": str(message.get("content") or "")[:500],
            "answer_check": {"ok": ok, "why": check},
            "model": answer.get("model"),
        }
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env-file", type=Path, default=Path("/var/tmp/toolrl.env"))
    parser.add_argument("--stop-worker-at", metavar="CHECKPOINT", help="e.g. sft/global_step_200")
    parser.add_argument("--restart-postgres", action="store_true", help="during training")
    parser.add_argument("--restart-scheduler", action="store_true", help="during training")
    parser.add_argument("--serve", action="store_true", help="then chat with serving-cpu")
    parser.add_argument(
        "--serve-only", action="store_true", help="no loop: chat with serving-cpu on the stack"
    )
    parser.add_argument("--timeout-min", type=float, default=60.0)
    args = parser.parse_args()
    if not args.env_file.is_file():
        parser.error(f"{args.env_file}: no such env file (benchmarks/stack_up.py --write-env)")
    if args.serve_only:
        serving = serve_and_ask(args.env_file)
        save("serving", serving)
        print(json.dumps(serving, indent=2))
        return 0 if serving.get("time_to_healthy_s") is not None else 1
    loop = run_loop(
        stop_worker_at=args.stop_worker_at,
        postgres_fault=args.restart_postgres,
        scheduler_fault=args.restart_scheduler,
        timeout_min=args.timeout_min,
    )
    save("loop", loop)
    print(json.dumps(loop, indent=2))
    succeeded = all(r["state"] == "success" for r in loop["runs"])
    if args.serve and succeeded:
        serving = serve_and_ask(args.env_file)
        save("serving", serving)
        print(json.dumps(serving, indent=2))
        succeeded = serving.get("time_to_healthy_s") is not None
    return 0 if succeeded else 1


if __name__ == "__main__":
    sys.exit(main())
