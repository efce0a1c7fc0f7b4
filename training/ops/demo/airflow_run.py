"""The demo's loop on Airflow's own services: the scheduler, not the demo, starts retraining.

`toolrl demo` triggers `toolcall_dataset` through the REST API; its `publish` task emits the
`toolrl_validated_dataset` Asset event, and the *scheduler* creates the Asset-triggered
`toolcall_retraining` run; `wait_training` defers to the triggerer. The demo only watches,
and checks what it watched: the run is Asset-triggered, and the version the event announced
is the version `plan_spec` trained on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from training.ops.airflow.follow import RunOutcome, down_services_message, follow_run, wait_for_run
from training.ops.airflow.layout import AirflowLayout, AirflowPorts, read_login
from training.ops.airflow.rest import AirflowApi, AirflowApiError
from training.ops.airflow.services import AirflowServiceError, stop, up
from training.pipeline.config import PipelineConfig
from training.pipeline.contracts import PublishedDataset, TrainingPlan

DATASET_DAG = "toolcall_dataset"
RETRAINING_DAG = "toolcall_retraining"


class AirflowLoopError(RuntimeError):
    """The loop on Airflow did not do what it promises; the message says what and where."""


@dataclass
class AirflowHandle:
    """The running deployment as the demo's service stack sees it (stopped with the stack)."""

    layout: AirflowLayout
    api: AirflowApi
    password_printed: str | None
    seconds_to_healthy: float
    name: str = "Airflow (api-server, scheduler, dag-processor, triggerer)"

    def stop(self) -> None:
        self.api.close()
        stop(self.layout)


def start_airflow(
    workdir: Path,
    port: int,
    log_ports: tuple[int, int],
    config: PipelineConfig,
    config_path: Path,
    extra_env: Mapping[str, str],
    on_line: Callable[[str], None],
) -> AirflowHandle:
    layout = AirflowLayout(workdir)
    ports = AirflowPorts(port, *log_ports)
    result = up(layout, ports, config, config_path, extra_env=extra_env)
    user, password = read_login(layout)
    api = AirflowApi(ports.api_url, user, password)
    for name, service in result.deployment.services.items():
        on_line(f"  healthy {name:<14} log {service.log}")
    try:
        api.wait_parsed([DATASET_DAG, RETRAINING_DAG])
    except AirflowApiError as exc:
        api.close()
        stop(layout)
        raise AirflowLoopError(str(exc)) from exc
    return AirflowHandle(layout, api, result.new_password, result.seconds_to_healthy)


@dataclass(frozen=True)
class LoopRuns:
    dataset: RunOutcome
    retraining: RunOutcome
    dataset_version: str
    dataset_dir: str
    asset_start_latency_s: float
    """From the Asset event to the start of the run the scheduler created for it."""


def _when(value: Any) -> datetime | None:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None


def start_latency(events: list[dict[str, Any]], run: dict[str, Any]) -> float:
    """Seconds from the newest Asset event the run consumed to the run's start."""
    stamps = [_when(e.get("timestamp")) for e in events]
    newest = max((t for t in stamps if t is not None), default=None)
    started = _when(run.get("start_date"))
    return (started - newest).total_seconds() if newest and started else float("nan")


def _fail_message(handle: AirflowHandle, outcome: RunOutcome) -> str:
    parts = [f"{outcome.dag_id} run {outcome.run_id} ended {outcome.state}"]
    for task_id in outcome.failed_tasks:
        try:
            tail = handle.api.task_log(outcome.dag_id, outcome.run_id, task_id)[-1500:]
        except AirflowApiError as exc:
            tail = f"(log unavailable: {exc})"
        parts.append(f"task {task_id} failed; the end of its log:\n{tail}")
    parts.append(f"task logs: {handle.layout.logs / 'tasks'}")
    return "\n".join(parts)


def run_loop(
    handle: AirflowHandle,
    rows: int,
    on_line: Callable[[str], None],
    watch_training: Callable[[], Any],
    timeout_s: float = 3 * 3600,
) -> LoopRuns:
    """Unpause both DAGs, trigger the dataset DAG, and follow both runs to their end."""
    api = handle.api
    try:
        for dag_id in (RETRAINING_DAG, DATASET_DAG):
            api.set_paused(dag_id, False)
        already = {r["dag_run_id"] for r in api.dag_runs(RETRAINING_DAG)}
        run_id = api.trigger(DATASET_DAG, {"rows": rows})
        on_line(f"triggered {DATASET_DAG} through the REST API: run {run_id}")
        dataset = follow_run(api, handle.layout, DATASET_DAG, run_id, on_line, timeout_s)
        if dataset.state != "success":
            raise AirflowLoopError(_fail_message(handle, dataset))
        published = PublishedDataset.model_validate(api.xcom(DATASET_DAG, run_id, "publish"))
        version = published.dataset_version
        on_line(f"{DATASET_DAG} succeeded in {dataset.seconds:.0f}s: published {version}")
        retraining_run = wait_for_run(
            api,
            RETRAINING_DAG,
            lambda r: r["dag_run_id"] not in already and r.get("run_type") == "asset_triggered",
            timeout_s=300,
        )
        events = api.upstream_asset_events(RETRAINING_DAG, retraining_run["dag_run_id"])
        latency = start_latency(events, api.dag_run(RETRAINING_DAG, retraining_run["dag_run_id"]))
        on_line(
            f"the scheduler started {RETRAINING_DAG} from the Asset event "
            f"{latency:.1f}s after the event: run {retraining_run['dag_run_id']}"
        )
        announced = [str((e.get("extra") or {}).get("dataset_version")) for e in events]
        if version not in announced:
            raise AirflowLoopError(
                f"the Asset-triggered run consumed events for {announced}, not {version}"
            )
        with watch_training():
            retraining = follow_run(
                api,
                handle.layout,
                RETRAINING_DAG,
                retraining_run["dag_run_id"],
                on_line,
                timeout_s,
            )
        if retraining.state != "success":
            raise AirflowLoopError(_fail_message(handle, retraining))
        planned = TrainingPlan.model_validate(
            api.xcom(RETRAINING_DAG, retraining.run_id, "plan_spec")
        )
        if planned.dataset_version != announced[-1]:
            raise AirflowLoopError(
                f"the run trained on {planned.dataset_version}, but its Asset event "
                f"announced {announced[-1]}"
            )
        on_line(
            f"{RETRAINING_DAG} succeeded in {retraining.seconds / 60:.1f} min, trained on "
            f"{planned.dataset_version} (the version its Asset event announced)"
        )
        return LoopRuns(dataset, retraining, version, published.dataset_dir, latency)
    except AirflowApiError as exc:
        down = down_services_message(handle.layout)
        raise AirflowLoopError(f"{exc}; {down}" if down else str(exc)) from exc
    except AirflowServiceError as exc:
        raise AirflowLoopError(str(exc)) from exc
    except ValidationError as exc:  # an XCom that is not its task's contract (or none)
        raise AirflowLoopError(f"a task returned no usable result: {exc}") from exc
