"""Both DAGs on Airflow's own services (api-server, scheduler with the LocalExecutor,
dag-processor, triggerer) started by `toolrl airflow up`'s code, against real local services
(MLflow server, Ray head with the Jobs API, MCP server in mock mode), a tiny model trained on
CPU as a Ray job.

What is asserted is what a user of scheduled retraining relies on: the scheduler starts
retraining from the dataset DAG's Asset event and the run trains on the version the event
announced; events that arrive while a training runs are queued into one next run (never two
trainings on one run key); a triggerer or scheduler killed while `wait_training` is deferred
is restarted and the run completes without a second Ray submission; a down api-server is
named with its log; a bad Asset event fails the run at `plan_spec` and leaves `champion` alone.

The tests in this module run in order and share one deployment (starting it takes ~20 s).
"""

from __future__ import annotations

import contextlib
import json
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.runtime.ports import free_port
from testkit.pipeline_specs import lenient_thresholds, tiny_spec
from testkit.ray_head import RayHead, ray_head
from training.ops.airflow.follow import RunFollowError, follow_run, wait_for_run
from training.ops.airflow.layout import AirflowLayout, AirflowPorts, read_login
from training.ops.airflow.rest import AirflowApi, AirflowApiError
from training.ops.airflow.services import (
    Deployment,
    kill,
    restart,
    service_states,
    stop,
    up,
)
from training.ops.demo.run import mcp_service, mlflow_service
from training.ops.demo.services import ManagedService
from training.pipeline.config import load_pipeline_config
from training.pipeline.contracts import PublishedDataset, TrainingPlan
from training.registry.auth import RegistryCredentials, provision

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
BIN = Path(sys.executable).parent
MODEL = "toolrl-airflow-e2e"
DATASET, RETRAINING = "toolcall_dataset", "toolcall_retraining"
VALIDATED_URI = "toolrl://datasets/validated"

TINY_SPEC = tiny_spec("airflow-e2e")
LENIENT = lenient_thresholds(require_same_data=False)


class Stack:
    def __init__(self, root: Path, api: AirflowApi, layout: AirflowLayout, env: dict[str, str]):
        self.root, self.api, self.layout, self.env = root, api, layout, env
        self.config_path = root / "pipeline.yaml"

    @property
    def config(self) -> Any:
        return load_pipeline_config({"TOOLRL_PIPELINE_CONFIG": str(self.config_path)})

    def follow(self, dag_id: str, run_id: str, timeout_s: float = 600) -> Any:
        return follow_run(self.api, self.layout, dag_id, run_id, lambda _: None, timeout_s)

    def wait_task_state(self, run_id: str, task_id: str, state: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.api.task_states(RETRAINING, run_id).get(task_id) == state:
                return
            time.sleep(0.5)
        raise AssertionError(
            f"{task_id} never reached {state}: {self.api.task_states(RETRAINING, run_id)}"
        )

    def retraining_runs(self) -> list[dict[str, Any]]:
        return self.api.dag_runs(RETRAINING)

    def next_asset_run(self, known: set[str], timeout_s: float = 120) -> dict[str, Any]:
        return wait_for_run(
            self.api,
            RETRAINING,
            lambda r: r["dag_run_id"] not in known and r["run_type"] == "asset_triggered",
            timeout_s,
        )


@pytest.fixture(scope="module")
def registry() -> RegistryCredentials:
    return RegistryCredentials.generate()


@pytest.fixture(scope="module")
def ray_cluster(
    tmp_path_factory: pytest.TempPathFactory, registry: RegistryCredentials
) -> Iterator[RayHead]:
    """This module's own Ray head (token auth on): its job drivers inherit the pipeline's
    MLflow identity from the head, as on a cluster where it comes from a Secret."""
    import shutil
    import tempfile

    short = Path(tempfile.mkdtemp(prefix="toolrl-ray-"))  # Ray's socket paths: 107 bytes max
    try:
        with ray_head(short, extra_env=registry.pipeline.client_env()) as head:
            yield head
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    ray_cluster: RayHead,
    registry: RegistryCredentials,
) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("airflow-e2e")
    ports = {"mlflow": free_port(), "mcp": free_port()}
    mlflow_url = f"http://127.0.0.1:{ports['mlflow']}"
    mcp_url = f"http://127.0.0.1:{ports['mcp']}/mcp"
    started: list[ManagedService] = []
    layout = AirflowLayout(root)
    try:
        for service in (
            mlflow_service(root, ports["mlflow"], root / "mlflow.log", {}, registry),
            mcp_service("mock", ports["mcp"], root / "mcp.log", {}),
        ):
            service.start()
            started.append(service)
        provision(mlflow_url, registry)
        pipeline = registry.pipeline
        (root / "spec.yaml").write_text(yaml.safe_dump(TINY_SPEC))
        (root / "lenient.yaml").write_text(yaml.safe_dump(LENIENT))
        (root / "pipeline.yaml").write_text(
            yaml.safe_dump(
                {
                    "dataset_schedule": None,
                    "dataset_rows": 120,
                    "data_root": str(root / "datasets"),
                    "workdir": str(root / "pipeline"),
                    "training_spec": str(root / "spec.yaml"),
                    "training_backend": "cpu",
                    "thresholds": str(root / "lenient.yaml"),
                    "eval_limit": 3,
                    "retries": 1,
                    "connections": {
                        "toolrl_ray": ray_cluster.connection_uri,
                        "toolrl_mlflow": mlflow_url.replace(
                            "http://", f"http://{pipeline.username}:{pipeline.password}@"
                        ),
                        "toolrl_mcp": mcp_url,
                    },
                }
            )
        )
        env = {
            "MLFLOW_TRACKING_URI": mlflow_url,
            "TOOLRL_MCP_URL": mcp_url,
            "TOOLRL_MODEL_NAME": MODEL,
        }
        airflow_ports = AirflowPorts(free_port(), free_port(), free_port())
        config = load_pipeline_config({"TOOLRL_PIPELINE_CONFIG": str(root / "pipeline.yaml")})
        result = up(layout, airflow_ports, config, root / "pipeline.yaml", extra_env=env)
        assert result.new_password  # generated on the first start
        user, password = read_login(layout)
        with (
            AirflowApi(airflow_ports.api_url, user, password) as api,
            pytest.MonkeyPatch.context() as patch,
        ):
            for key, value in registry.serving.client_env().items():
                patch.setenv(key, value)  # this test process reads the registry, read-only
            api.wait_parsed([DATASET, RETRAINING])
            yield Stack(root, api, layout, env)
    finally:
        stop(layout)
        for service in reversed(started):
            service.stop()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_four_services_are_healthy_and_nothing_is_world_readable(stack: Stack) -> None:
    deployment = Deployment.load(stack.layout)
    assert deployment is not None
    assert service_states(deployment) == {
        "api-server": "healthy",
        "scheduler": "healthy",
        "dag-processor": "healthy",
        "triggerer": "healthy",
    }
    assert stack.api.import_errors() == []
    retraining = stack.api.dag(RETRAINING)
    assert retraining is not None and retraining["timetable_summary"] == "Asset"
    assert retraining["max_active_runs"] == 1
    home = stack.layout.home
    assert _mode(home) == 0o700
    for path in [stack.layout.passwords, stack.layout.database, stack.layout.registry]:
        assert _mode(path) & 0o077 == 0, f"{path} is readable by others"
    for log in stack.layout.logs.glob("*.log"):
        assert _mode(log) & 0o077 == 0, f"{log} is readable by others"
    status = subprocess.run(
        [str(BIN / "toolrl"), "airflow", "status", "--workdir", str(stack.root), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert '"scheduler": "healthy"' in status.stdout


def _ray_jobs_for(cluster: RayHead, run_id: str) -> list[str]:
    from training.jobs.submit import connect, submission_id

    prefix = submission_id(TINY_SPEC["name"], run_id).rsplit("-a", 1)[0]
    jobs = connect(cluster.address, cluster.token).list_jobs()
    return [j.submission_id for j in jobs if (j.submission_id or "").startswith(prefix)]


def _restart(stack: Stack, name: str) -> None:
    restart(stack.layout, name, stack.config, stack.config_path, extra_env=stack.env)


def _versions(tracking_uri: str) -> dict[str, set[str]]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    found = client.search_model_versions(f"name='{MODEL}'")
    return {v.version: set(client.get_model_version(MODEL, v.version).aliases) for v in found}


def test_the_scheduler_trains_on_each_asset_event_and_survives_triggerer_and_scheduler_kills(
    stack: Stack, ray_cluster: RayHead
) -> None:
    api = stack.api
    api.set_paused(RETRAINING, False)
    api.set_paused(DATASET, False)
    first_dataset = api.trigger(DATASET, {"rows": 120})
    assert stack.follow(DATASET, first_dataset).state == "success"
    first_version = PublishedDataset.model_validate(
        api.xcom(DATASET, first_dataset, "publish")
    ).dataset_version

    # the scheduler, not this test, starts retraining from the Asset event
    r1 = stack.next_asset_run(set())
    events = api.upstream_asset_events(RETRAINING, r1["dag_run_id"])
    assert [e["extra"]["dataset_version"] for e in events] == [first_version]

    # the triggerer dies while the wait is deferred, then comes back
    stack.wait_task_state(r1["dag_run_id"], "wait_training", "deferred", timeout_s=300)
    kill(stack.layout, "triggerer", signal.SIGKILL)
    assert service_states(Deployment.load(stack.layout))["triggerer"] == "down"  # type: ignore[arg-type]
    # two more dataset versions while the first training runs: they queue, not overlap
    later_versions = []
    for _ in range(2):
        run_id = api.trigger(DATASET, {"rows": 120})
        assert stack.follow(DATASET, run_id).state == "success"
        published = PublishedDataset.model_validate(api.xcom(DATASET, run_id, "publish"))
        later_versions.append(published.dataset_version)
    _restart(stack, "triggerer")
    assert stack.follow(RETRAINING, r1["dag_run_id"]).state == "success"
    first_plan = TrainingPlan.model_validate(api.xcom(RETRAINING, r1["dag_run_id"], "plan_spec"))
    assert first_plan.dataset_version == first_version
    assert len(_ray_jobs_for(ray_cluster, r1["dag_run_id"])) == 1
    assert api.task_instance(RETRAINING, r1["dag_run_id"], "submit_training")["try_number"] == 1

    # the two events led to exactly one next run. Airflow 3.3.2 lets it consume only the
    # first (apache/airflow#56050); plan_spec claims the second as well, and trains on the
    # newest of its own events
    r2 = stack.next_asset_run({r1["dag_run_id"]})
    consumed = [
        e["extra"]["dataset_version"]
        for e in api.upstream_asset_events(RETRAINING, r2["dag_run_id"])
    ]
    assert consumed == later_versions[:1]

    # the scheduler dies while the second wait is deferred, then comes back
    stack.wait_task_state(r2["dag_run_id"], "wait_training", "deferred", timeout_s=300)
    kill(stack.layout, "scheduler", signal.SIGKILL)
    time.sleep(3)
    _restart(stack, "scheduler")
    assert stack.follow(RETRAINING, r2["dag_run_id"]).state == "success"
    planned = TrainingPlan.model_validate(api.xcom(RETRAINING, r2["dag_run_id"], "plan_spec"))
    assert planned.dataset_version == later_versions[-1]
    assert planned.dataset_superseded == (later_versions[0],)
    assert len(_ray_jobs_for(ray_cluster, r2["dag_run_id"])) == 1
    assert [r["dag_run_id"] for r in stack.retraining_runs()] == [
        r1["dag_run_id"],
        r2["dag_run_id"],
    ]

    versions = _versions(stack.env["MLFLOW_TRACKING_URI"])
    assert len(versions) == 2
    assert "champion" in versions[max(versions, key=int)]
    # SQLite (WAL) held under four services and their task runners
    for log in stack.layout.logs.rglob("*.log"):
        assert "database is locked" not in log.read_text(errors="replace"), log


def test_a_down_api_server_is_named_with_its_log(stack: Stack) -> None:
    kill(stack.layout, "api-server", signal.SIGKILL)
    try:
        with pytest.raises(RunFollowError) as caught:
            follow_run(
                stack.api,
                stack.layout,
                RETRAINING,
                "any-run",  # the api-server is gone: no call gets as far as the run
                lambda _: None,
                timeout_s=30,
                poll_s=0.5,
                unavailable_grace_s=2,
            )
        log = stack.layout.log_of("api-server")
        assert f"api-server is down (log: {log})" in str(caught.value)
        status = subprocess.run(
            [str(BIN / "toolrl"), "airflow", "status", "--workdir", str(stack.root)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert status.returncode == 1
        assert "down" in status.stdout and "api-server" in status.stdout
    finally:
        _restart(stack, "api-server")


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"dataset_dir": "/nonexistent/toolrl-dataset", "dataset_version": "v1"}, "does not exist"),
        ({"dataset_dir": 7}, "must hold a `dataset_dir` string"),
    ],
    ids=["missing-dataset", "wrong-type"],
)
def test_a_bad_asset_event_fails_at_plan_spec_and_leaves_the_champion(
    stack: Stack, extra: dict[str, Any], reason: str
) -> None:
    stack.api.set_paused(RETRAINING, False)
    before = _versions(stack.env["MLFLOW_TRACKING_URI"])
    known = {r["dag_run_id"] for r in stack.retraining_runs()}
    stack.api.create_asset_event(VALIDATED_URI, extra)
    run = stack.next_asset_run(known)
    outcome = stack.follow(RETRAINING, run["dag_run_id"], timeout_s=300)
    assert outcome.state == "failed"
    assert outcome.failed_tasks == ["plan_spec"]
    assert stack.api.task_instance(RETRAINING, run["dag_run_id"], "plan_spec")["try_number"] == 1
    assert reason in stack.api.task_log(RETRAINING, run["dag_run_id"], "plan_spec")
    assert _versions(stack.env["MLFLOW_TRACKING_URI"]) == before


def test_rest_errors_name_the_call(stack: Stack) -> None:
    with pytest.raises(AirflowApiError, match=r"POST /api/v2/dags/no_such_dag/dagRuns -> 404"):
        stack.api.trigger("no_such_dag")
    with pytest.raises(AirflowApiError, match="login was refused for user 'admin'"):
        AirflowApi(stack.api.base_url, "admin", "wrong").dag(RETRAINING)


def test_no_credential_leaks_into_logs_xcom_runtime_env_or_mlflow(
    stack: Stack, ray_cluster: RayHead, registry: RegistryCredentials
) -> None:
    """After every run above: the Ray token and the MLflow passwords appear nowhere a user
    or an operator can read them without being given them."""
    from mlflow import MlflowClient

    from training.jobs.submit import connect

    secrets = {
        "ray token": ray_cluster.token,
        "mlflow admin": registry.admin.password,
        "mlflow pipeline": registry.pipeline.password,
        "mlflow serving": registry.serving.password,
    }
    places: dict[str, str] = {}
    for log in [*stack.root.rglob("*.log"), *ray_cluster.log.parent.rglob("*.log")]:
        places[str(log)] = log.read_text(errors="replace")
    for run in stack.retraining_runs() + stack.api.dag_runs(DATASET):
        dag_id, run_id = run["dag_id"], run["dag_run_id"]
        for task_id in stack.api.task_states(dag_id, run_id):
            with contextlib.suppress(AirflowApiError):  # tasks that returned nothing
                places[f"xcom {dag_id}/{run_id}/{task_id}"] = json.dumps(
                    stack.api.xcom(dag_id, run_id, task_id)
                )
            with contextlib.suppress(AirflowApiError):
                places[f"task log {dag_id}/{run_id}/{task_id}"] = stack.api.task_log(
                    dag_id, run_id, task_id
                )
    for job in connect(ray_cluster.address, ray_cluster.token).list_jobs():
        places[f"ray job {job.submission_id}"] = json.dumps(
            {"runtime_env": job.runtime_env, "metadata": job.metadata, "entry": job.entrypoint}
        )
    client = MlflowClient(stack.env["MLFLOW_TRACKING_URI"])
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id]):
            places[f"mlflow run {run.info.run_id}"] = json.dumps(
                {"params": run.data.params, "tags": run.data.tags}
            )
    for version in client.search_model_versions(f"name='{MODEL}'"):
        places[f"mlflow version {version.version}"] = json.dumps(
            {"tags": version.tags, "source": version.source}
        )
    assert len(places) > 20  # the scan saw logs, XComs, jobs and registry entries
    assert any(k.startswith("ray job") for k in places) and any("xcom" in k for k in places)
    leaks = [
        f"{what} in {where}"
        for where, text in places.items()
        for what, secret in secrets.items()
        if secret in text
    ]
    assert leaks == []
    # and Ray's own warning about an open cluster never appeared
    assert not any("Token authentication is disabled" in text for text in places.values())
