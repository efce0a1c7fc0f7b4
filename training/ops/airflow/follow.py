"""Follow a DAG run through the REST API: task transitions as progress lines, the end state.

The demo and the tests watch runs the scheduler started, so they cannot read a subprocess's
output as `airflow dags test` allowed; the task-instance states are the progress instead.
When the api-server stops answering, the error names the service that is down and its log,
because "connection refused" alone does not tell a user what to restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from training.ops.airflow.layout import AirflowLayout
from training.ops.airflow.rest import AirflowApi, AirflowUnavailableError
from training.ops.airflow.services import Deployment, service_states

FINISHED = ("success", "failed")
_VERBS = {
    "running": "->",
    "deferred": "..",
    "success": "ok",
    "failed": "FAILED",
    "upstream_failed": "skipped (upstream failed)",
    "skipped": "skipped",
    "up_for_retry": "retrying",
}


class RunFollowError(RuntimeError):
    """A run could not be followed to its end; the message says why and where to look."""


@dataclass
class RunOutcome:
    dag_id: str
    run_id: str
    state: str
    run: dict[str, Any]
    tasks: dict[str, str | None] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failed_tasks(self) -> list[str]:
        return [t for t, s in self.tasks.items() if s == "failed"]


def down_services_message(layout: AirflowLayout) -> str:
    """Which Airflow services are not healthy, with their logs; '' when all are."""
    deployment = Deployment.load(layout)
    if deployment is None:
        return f"no Airflow deployment is recorded in {layout.registry}"
    states = service_states(deployment)
    bad = [
        f"{name} is {state} (log: {deployment.services[name].log})"
        for name, state in states.items()
        if state != "healthy"
    ]
    return "; ".join(bad)


def follow_run(
    api: AirflowApi,
    layout: AirflowLayout,
    dag_id: str,
    run_id: str,
    on_line: Callable[[str], None],
    timeout_s: float,
    poll_s: float = 2.0,
    unavailable_grace_s: float = 60.0,
) -> RunOutcome:
    """Poll until the run finishes. A few seconds without the api-server are tolerated (a
    restart); longer, and the error names the service that is down."""
    started = time.monotonic()
    seen: dict[str, str | None] = {}
    unreachable_since: float | None = None
    while True:
        try:
            run = api.dag_run(dag_id, run_id)
            tasks = api.task_states(dag_id, run_id)
            unreachable_since = None
        except AirflowUnavailableError as exc:
            now = time.monotonic()
            unreachable_since = unreachable_since or now
            if now - unreachable_since > unavailable_grace_s:
                raise RunFollowError(
                    f"lost the Airflow api-server while following {dag_id} {run_id}: "
                    f"{down_services_message(layout) or exc}"
                ) from exc
            time.sleep(poll_s)
            continue
        for task_id, state in tasks.items():
            if state != seen.get(task_id) and state in _VERBS:
                on_line(f"  {_VERBS[state]} {task_id}  ({time.monotonic() - started:.0f}s)")
        seen = tasks
        state = str(run.get("state"))
        if state in FINISHED:
            return RunOutcome(dag_id, run_id, state, run, tasks, time.monotonic() - started)
        if time.monotonic() - started > timeout_s:
            raise RunFollowError(
                f"{dag_id} {run_id} still {state} after {timeout_s:.0f}s; task states: {tasks}"
            )
        time.sleep(poll_s)


def wait_for_run(
    api: AirflowApi,
    dag_id: str,
    accept: Callable[[dict[str, Any]], bool],
    timeout_s: float,
    poll_s: float = 1.0,
) -> dict[str, Any]:
    """The first run of `dag_id` that `accept` takes (e.g. the Asset-triggered one)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for run in api.dag_runs(dag_id):
            if accept(run):
                return run
        if time.monotonic() > deadline:
            raise RunFollowError(f"no matching run of {dag_id} within {timeout_s:.0f}s")
        time.sleep(poll_s)
