"""`toolrl demo`: the whole retraining loop on one machine, through Airflow, for real.

Services on loopback (MLflow server, a Ray head with its Jobs API, the MCP tool server in
mock mode for training and real mode for serving) and Airflow's own four services; the demo
triggers the dataset DAG through the REST API and the scheduler starts retraining from its
Asset event (`--dags-test` runs both with `airflow dags test` instead, for debugging). Then
the champion is served and answers one chat that calls a real MCP tool. Every service started
here is stopped at the end, on Ctrl-C and on failure, unless `--keep-running`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from rich.markup import escape

from serving.runtime.ports import free_port
from training.jobs.auth import new_token, ray_auth_env
from training.jobs.local_head import head_command
from training.ops.demo.airflow_run import AirflowHandle, run_loop, start_airflow
from training.ops.demo.budget import budgeted_spec
from training.ops.demo.common import BIN, DEMO_QUESTION, MODEL_NAME, console
from training.ops.demo.pack import PackDemo, pack_answer_check, pack_question, prepare_pack_demo
from training.ops.demo.progress import CheckpointWatcher
from training.ops.demo.services import ManagedService, ServiceStack, service_stack
from training.ops.demo.summary import (
    champion_history_report,
    current_champion,
    print_airflow_access,
    print_summary,
    rejection_note,
)
from training.pipeline.config import REPO_ROOT
from training.registry.auth import Identity, RegistryCredentials, provision, server_env
from training.spec.model import load_spec

_RUN_STATE = re.compile(r"DagRun Finished: .*? state=(\w+)")
_TASK_LINE = re.compile(r"\[DAG TEST\] (starting|end task) task_id=(\S+)")


class DemoError(RuntimeError):
    pass


def mlflow_connection(ports: dict[str, int], pipeline: Identity) -> str:
    """The `toolrl_mlflow` connection: the server, the pipeline identity as login/password
    (the tasks hand them to MLflow's client; they never become part of a tracking URI)."""
    return f"http://{pipeline.username}:{pipeline.password}@127.0.0.1:{ports['mlflow']}"


def demo_secrets(path: Path) -> dict[str, str]:
    """The embedded deployment's secrets, generated once per workdir (mode 0600): the Ray
    cluster token, the real MCP server's bearer token and the front door's API key."""
    if path.is_file():
        loaded = json.loads(path.read_text())
        if isinstance(loaded, dict) and {"ray_token", "mcp_token", "frontdoor_key"} <= set(loaded):
            return {k: str(v) for k, v in loaded.items()}
    made = {"ray_token": new_token(), "mcp_token": new_token(), "frontdoor_key": new_token()}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(made, handle, indent=2)
    return made


def ray_connection(ports: dict[str, int], ray_token: str) -> str:
    """The `toolrl_ray` connection: the Jobs API, the cluster's token as its password (sent as
    a bearer header). Only Airflow gets it, never the other services' environment."""
    return f"http://:{ray_token}@127.0.0.1:{ports['ray_dashboard']}"


def _env(workdir: Path, ports: dict[str, int], model_name: str = MODEL_NAME) -> dict[str, str]:
    mcp = f"http://127.0.0.1:{ports['mcp_mock']}/mcp"
    mlflow = f"http://127.0.0.1:{ports['mlflow']}"
    return {
        "AIRFLOW_HOME": str(workdir / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW_CONN_TOOLRL_MLFLOW": mlflow,
        "AIRFLOW_CONN_TOOLRL_MCP": mcp,
        "MLFLOW_TRACKING_URI": mlflow,
        "TOOLRL_MCP_URL": mcp,
        "TOOLRL_MODEL_NAME": model_name,
        "TOOLRL_PIPELINE_CONFIG": str(workdir / "pipeline.yaml"),
        "PYTHONPATH": str(REPO_ROOT),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAY_USAGE_STATS_ENABLED": "0",
        "TOKENIZERS_PARALLELISM": "false",
    }


DEMO_SPEC = REPO_ROOT / "training" / "specs" / "cpu_smollm2.yaml"
DEMO_EVAL_ROWS = 96
"""Held-out cases the DAG's evaluation runs per model (a 96-row figure moves by about +-10
points; the full split is ~190 rows and doubles the stage's time)."""


def _write_pipeline_config(
    workdir: Path,
    rows: int,
    env: dict[str, str],
    api_port: int,
    training_spec: Path,
    pack: PackDemo | None = None,
) -> Path:
    """The deployment's one config file: DAG files, tasks and `toolrl airflow up` read it.
    With a pack, the dataset DAG generates from it (against its server, through the same
    sources file serving uses) and retraining replays the version's store."""
    config: dict[str, Any] = {
        # triggered by the demo; a cron would also start a catch-up run on unpause
        "dataset_schedule": None,
        "dataset_rows": rows,
        "data_root": str(workdir / "datasets"),
        "workdir": str(workdir / "pipeline"),
        "training_spec": str(training_spec),
        "training_backend": "cpu",
        "eval_backend": "cpu",
        "eval_limit": DEMO_EVAL_ROWS,
        "thresholds": str(REPO_ROOT / "training" / "specs" / "thresholds_demo.yaml"),
        "retries": 1,
        "connections": {
            "toolrl_ray": env["AIRFLOW_CONN_TOOLRL_RAY"],
            "toolrl_mlflow": env["AIRFLOW_CONN_TOOLRL_MLFLOW"],
            "toolrl_mcp": env["AIRFLOW_CONN_TOOLRL_MCP"],
        },
        "airflow": {"api_port": api_port},
    }
    if pack is not None:
        config |= {"pack": pack.pack, "pack_sources": str(pack.sources_file)}
    path = workdir / "pipeline.yaml"
    path.touch(mode=0o600)  # it holds the connections, the Ray token among them
    path.chmod(0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def mlflow_service(
    root: Path,
    port: int,
    log: Path,
    env: dict[str, str],
    auth: RegistryCredentials | None = None,
) -> ManagedService:
    """An MLflow tracking + registry server on SQLite with a local artifact store; with
    `auth`, the basic-auth app (anonymous 401, serving read-only, pipeline owns the model)."""
    auth_args = ["--app-name", "basic-auth"] if auth else []
    auth_env = server_env(auth, root) if auth else {}
    return ManagedService(
        "MLflow server" + (" (basic auth)" if auth else ""),
        [
            str(BIN / "mlflow"),
            "server",
            *auth_args,
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        f"http://127.0.0.1:{port}/health",
        log,
        {**env, **auth_env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )


def mcp_service(mode: str, port: int, log: Path, env: dict[str, str]) -> ManagedService:
    """The MCP tool server: `mock` (frozen clock, faults off) for training, `real` to serve."""
    purpose = "training" if mode == "mock" else "serving"
    return ManagedService(
        f"MCP tool server ({mode}, {purpose})",
        [
            str(BIN / "toolrl"),
            "mcp",
            "serve",
            "--mode",
            mode,
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        f"http://127.0.0.1:{port}/healthz",
        log,
        env,
    )


def start_services(
    stack: ServiceStack,
    workdir: Path,
    env: dict[str, str],
    ports: dict[str, int],
    secrets: dict[str, str],
    registry: RegistryCredentials,
    real_tools: bool = True,
) -> None:
    """MLflow, the MCP server (mock: the `toolrl_mcp` connection; real: serving's built-in
    tools, not started for a pack, whose serving calls the pack's own server) and Ray."""
    logs = workdir / "logs"
    ray_token = secrets["ray_token"]
    stack.start(
        mlflow_service(workdir / "mlflow", ports["mlflow"], logs / "mlflow.log", env, registry)
    )
    provision(env["MLFLOW_TRACKING_URI"], registry)
    stack.start(mcp_service("mock", ports["mcp_mock"], logs / "mcp-mock.log", env))
    # real tools answer only with the serving token (the mock stays open on loopback: it is
    # the training sandbox, reached by the Ray jobs and the evaluation)
    real_env = {**env, "TOOLRL_MCP_TOKEN": secrets["mcp_token"]}
    if real_tools:
        stack.start(mcp_service("real", ports["mcp_real"], logs / "mcp-real.log", real_env))
    ray_tmp = Path(tempfile.mkdtemp(prefix="toolrl-ray-"))  # short: Ray's socket paths
    stack.start(
        ManagedService(
            "Ray head (Jobs API)",
            head_command(BIN / "ray", ports["ray"], ports["ray_dashboard"], ray_tmp),
            f"http://127.0.0.1:{ports['ray_dashboard']}/api/version",
            logs / "ray.log",
            # the job drivers inherit the head's env: the token, and the pipeline identity
            # that logs training runs to MLflow (never put in a job's runtime_env)
            {**env, **ray_auth_env(ray_token), **registry.pipeline.client_env()},
            start_timeout_s=180,
        )
    )


def run_dag(
    dag_id: str, env: dict[str, str], log: Path, conf: dict[str, Any] | None = None
) -> None:
    """`airflow dags test`, streaming task starts/ends as progress; the full log to a file."""
    command = [str(BIN / "airflow"), "dags", "test", dag_id]
    if conf:
        command += ["-c", json.dumps(conf)]
    started = time.monotonic()
    console.rule(f"[bold]Airflow DAG {dag_id}")
    with (
        log.open("w") as sink,
        subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **env},
        ) as process,
    ):
        assert process.stdout is not None
        for line in process.stdout:
            sink.write(line)
            match = _TASK_LINE.search(line)
            if match:
                verb = "->" if match.group(1) == "starting" else "ok"
                console.print(
                    f"  {verb} {match.group(2)}  [dim]({time.monotonic() - started:.0f}s)"
                )
        code = process.wait()
    finished = _RUN_STATE.findall(log.read_text(errors="replace"))
    if code != 0 or not finished or finished[-1] != "success":
        state = finished[-1] if finished else "unknown"
        raise DemoError(f"DAG {dag_id} ended {state} (exit {code}); see {log}")
    console.print(f"[green]{dag_id} succeeded[/green] in {time.monotonic() - started:.0f}s")


def _published_dataset(workdir: Path) -> Path:
    versions = [p for p in (workdir / "datasets").iterdir() if (p / "manifest.json").is_file()]
    if not versions:
        raise DemoError("the dataset DAG published no version")
    return max(versions, key=lambda p: p.stat().st_mtime)


def gate_outcome(workdir: Path) -> tuple[bool, str]:
    """Whether the last retraining run promoted its candidate, and the gate's reasons."""
    decisions = sorted(
        (workdir / "pipeline").rglob("gate_decision.json"), key=lambda p: p.stat().st_mtime
    )
    if not decisions:
        raise DemoError("the retraining run left no gate decision")
    decision = json.loads(decisions[-1].read_text())
    reasons = "; ".join(decision.get("reasons", [])) or "all checks passed"
    return decision.get("decision") == "promote", reasons


def ask_front_door(
    base_url: str, api_key: str, question: str = DEMO_QUESTION, model: str = MODEL_NAME
) -> dict[str, Any]:
    """One chat through the served champion + real MCP tools, as a user would call it."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=api_key, timeout=300)
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}]
    )
    payload: dict[str, Any] = reply.model_dump()
    return payload


def serve_and_chat(
    stack: ServiceStack,
    workdir: Path,
    env: dict[str, str],
    ports: dict[str, int],
    reader: dict[str, str],
    secrets: dict[str, str],
    pack: PackDemo | None = None,
    question: str = DEMO_QUESTION,
) -> dict[str, Any]:
    """Serve the champion behind the front door and ask `question`. The tools: the project's
    real MCP server, or with a pack the pack's own server, live, through `--tool-sources`."""
    tool_sources = ["--tool-sources", str(pack.sources_file)] if pack else []
    serving_env = {
        **env,
        **reader,  # the serving identity: it may read the registry, never move an alias
        "TOOLRL_MCP_URL": f"http://127.0.0.1:{ports['mcp_real']}/mcp",
        "TOOLRL_MCP_TOKEN": secrets["mcp_token"],
        "TOOLRL_FRONTDOOR_API_KEY": secrets["frontdoor_key"],
    }
    stack.start(
        ManagedService(
            "champion serving (CPU engine server + front door)",
            [
                str(BIN / "toolrl"),
                "serve",
                "--backend",
                "cpu",
                "--port",
                str(ports["frontdoor"]),
                "--watch-interval",
                "0",
                "--max-tokens",
                "256",
                "--cache-dir",
                str(workdir / "serving" / "models"),
                *tool_sources,
            ],
            f"http://127.0.0.1:{ports['frontdoor']}/health",
            workdir / "logs" / "serving.log",
            serving_env,
            start_timeout_s=600,
        )
    )
    return ask_front_door(
        f"http://127.0.0.1:{ports['frontdoor']}/v1",
        secrets["frontdoor_key"],
        question,
        env["TOOLRL_MODEL_NAME"],
    )


def _on_airflow(
    stack: ServiceStack,
    workdir: Path,
    env: dict[str, str],
    ports: dict[str, int],
    config_path: Path,
    rows: int,
    watch_training: Callable[[], Any],
    runs: int = 1,
) -> tuple[Path, AirflowHandle]:
    """Both DAGs on Airflow's services: trigger the dataset DAG, the scheduler does the rest;
    `runs` times, as a schedule would (each a fresh dataset; after the first, retraining
    continues from the champion)."""
    from training.pipeline.config import load_pipeline_config

    config = load_pipeline_config({"TOOLRL_PIPELINE_CONFIG": str(config_path)})
    console.rule("[bold]Airflow services")
    started = time.monotonic()
    with console.status("starting Airflow: api-server, scheduler, dag-processor, triggerer ..."):
        handle = start_airflow(
            workdir,
            ports["airflow"],
            (ports["airflow_worker_logs"], ports["airflow_trigger_logs"]),
            config,
            config_path,
            env,
            console.print,
        )
    stack.adopt(handle)
    console.print(
        f"[green]up[/green] {handle.name}: healthy in {handle.seconds_to_healthy:.0f}s, DAGs "
        f"parsed in {time.monotonic() - started:.0f}s; UI {handle.api.base_url}"
    )
    loop = None
    for run in range(1, runs + 1):
        console.rule(f"[bold]Airflow DAG runs (scheduled by Airflow): run {run} of {runs}")
        loop = run_loop(handle, rows, console.print, watch_training)
    assert loop is not None
    return Path(loop.dataset_dir), handle


def _shoot_pages(workdir: Path, dataset: Path, handle: AirflowHandle | None) -> None:
    from training.ops.demo.airflow_run import DATASET_DAG, RETRAINING_DAG
    from training.ops.demo.pages import check_and_shoot

    reports = sorted(
        (workdir / "pipeline").rglob("candidate.html"), key=lambda p: p.stat().st_mtime
    )
    pages = {"validation_page": dataset / "validation" / "index.html"}
    if reports:
        pages["eval_report"] = reports[-1]
    airflow = (
        (handle.api.base_url, handle.api.token, [DATASET_DAG, RETRAINING_DAG]) if handle else None
    )
    console.rule("[bold]pages (offline check and screenshots)")
    check_and_shoot(pages, workdir / "screenshots", airflow, console.print)


def run_demo(
    workdir: Path,
    rows: int = 2_000,
    *,
    keep_running: bool = False,
    dags_test: bool = False,
    pack: str | None = None,
    pack_sources: Path | None = None,
    budget_minutes: float | None = None,
    runs: int = 1,
) -> None:
    """The loop on the built-in tools, or with `pack` on a task pack's MCP server (see
    `training.ops.demo.pack`: generated against the server, trained and evaluated on its replay,
    served with the live server's tools)."""
    if dags_test and runs > 1:
        raise DemoError("--runs needs Airflow's scheduler: --dags-test runs the loop once")
    started = time.monotonic()
    workdir = workdir.resolve()
    for sub in ("logs", "mlflow", "datasets", "pipeline", "serving"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    target = _pack_target(pack, workdir, pack_sources) if pack else None
    names = ("mlflow", "mcp_mock", "mcp_real", "ray", "ray_dashboard", "frontdoor", "airflow")
    ports = {name: free_port() for name in (*names, "airflow_worker_logs", "airflow_trigger_logs")}
    secrets = demo_secrets(workdir / "secrets.json")
    ray_token = secrets["ray_token"]  # the head requires it, the Airflow connection holds it
    registry = RegistryCredentials.load_or_generate(workdir / "mlflow" / "credentials.json")
    env = _env(workdir, ports, target.model_name if target else MODEL_NAME)
    secured = {
        **env,
        "AIRFLOW_CONN_TOOLRL_RAY": ray_connection(ports, ray_token),
        "AIRFLOW_CONN_TOOLRL_MLFLOW": mlflow_connection(ports, registry.pipeline),
    }
    budget = budgeted_spec(DEMO_SPEC, workdir, budget_minutes)
    console.print(f"[bold]{budget.describe()}[/bold]")
    config_path = _write_pipeline_config(
        workdir, rows, secured, ports["airflow"], budget.spec_path, target
    )
    cpu = budget.plan.apply(load_spec(DEMO_SPEC).cpu) if budget.plan else load_spec(DEMO_SPEC).cpu

    def watch_training() -> CheckpointWatcher:
        return CheckpointWatcher(
            workdir / "pipeline",
            lambda message: console.print(f"     [dim]training:[/dim] {message}"),
            totals={"sft": cpu.sft_steps, "grpo": cpu.grpo_steps},
        )

    handle: AirflowHandle | None = None
    with service_stack() as stack:
        start_services(stack, workdir, env, ports, secrets, registry, real_tools=target is None)
        if dags_test:
            dataset = _with_dags_test(workdir, secured, watch_training)
        else:
            dataset, handle = _on_airflow(
                stack, workdir, env, ports, config_path, rows, watch_training, runs
            )
        promoted, reasons = gate_outcome(workdir)
        champion = current_champion(
            env["MLFLOW_TRACKING_URI"], env["TOOLRL_MODEL_NAME"], reader=registry.serving
        )
        answer: dict[str, Any] = {}
        question, expected = pack_question(dataset) if target else (DEMO_QUESTION, [])
        if not promoted:  # a rejection is a result of the gate, not a failure of the pipeline
            note = rejection_note(reasons, champion, budget.minutes)
            console.print(f"[yellow]{escape(note)}[/yellow]")
        if champion:
            answer = serve_and_chat(
                stack,
                workdir,
                env,
                ports,
                registry.serving.client_env(),
                secrets,
                target,
                question,
            )
        check = pack_answer_check(answer, expected) if target and answer else None
        _shoot_pages(workdir, dataset, handle)
        champion_history_report(workdir, env["MLFLOW_TRACKING_URI"], registry.pipeline)
        elapsed = time.monotonic() - started
        print_summary(workdir, dataset, env, answer, elapsed, champion, promoted, check, question)
        print_airflow_access(handle)
        console.print(
            f"credentials           {workdir / 'secrets.json'} (Ray token, MCP token, front door "
            f"key) and {workdir / 'mlflow' / 'credentials.json'} (MLflow admin, pipeline, "
            "serving); both mode 0600"
        )
        if keep_running:
            _keep_running(stack, workdir)


def _pack_target(pack: str, workdir: Path, sources: Path | None) -> PackDemo:
    """The pack, checked before any service starts (a typo costs seconds, not a run)."""
    from training.data.packs.loader import PackError

    try:
        target = prepare_pack_demo(pack, workdir, sources)
    except PackError as exc:
        raise DemoError(f"--pack {pack}: " + "; ".join(exc.problems)) from exc
    console.print(
        f"pack                  {target.name} (server {target.server!r}; serving's tool "
        f"sources {target.sources_file}; registry name {target.model_name})"
    )
    return target


def _with_dags_test(workdir: Path, env: dict[str, str], watch_training: Callable[[], Any]) -> Path:
    """The debug path: each DAG in one process with `airflow dags test` (no scheduler)."""
    with console.status("preparing the Airflow metadata DB (SQLite) ..."):
        subprocess.run(
            [str(BIN / "airflow"), "db", "migrate"],
            check=True,
            capture_output=True,
            env={**os.environ, **env},
        )
    run_dag("toolcall_dataset", env, workdir / "logs" / "dag-dataset.log")
    dataset = _published_dataset(workdir)
    with watch_training():
        run_dag(
            "toolcall_retraining",
            env,
            workdir / "logs" / "dag-retraining.log",
            {"dataset_dir": str(dataset), "backend": "cpu"},
        )
    return dataset


def _keep_running(stack: ServiceStack, workdir: Path) -> None:
    """Leave every service up for browsing; `toolrl airflow down` stops them all later."""
    from training.ops.airflow.layout import AirflowLayout
    from training.ops.airflow.services import RunningService, record_companions

    companions = [
        RunningService(s.name, s.process.pid, str(s.log_path), time.time())
        for s in stack.detach()
        if isinstance(s, ManagedService) and s.process is not None
    ]
    record_companions(AirflowLayout(workdir), companions)
    console.print(
        f"[bold]services left running[/bold] (--keep-running): stop them all with "
        f"`toolrl airflow down --workdir {workdir}`"
    )
