"""The deferrable wait: RayJobTrigger against a real Ray head (token auth on) fires exactly
once with the job's terminal state (succeeded, failed, stopped), reports an unreachable API,
and stops at once, saying why, when the connection's token is missing or wrong."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from toolrl_plugins.triggers import RayJobTrigger

from testkit.ray_head import RayHead, free_port
from training.jobs.submit import JobRequest, connect, get_status, runtime_env, submission_id, submit

CONN = "toolrl_ray"


@pytest.fixture
def ray_conn(ray_cluster: RayHead, monkeypatch: pytest.MonkeyPatch) -> str:
    """The `toolrl_ray` connection as Airflow reads it from the environment: the token is
    its password, which is where the trigger must take it from."""
    monkeypatch.setenv("AIRFLOW_CONN_TOOLRL_RAY", ray_cluster.connection_uri)
    return CONN


def first_event(trigger: RayJobTrigger, timeout_s: float = 120) -> dict[str, Any]:
    async def collect() -> list[Any]:
        return [event async for event in trigger.run()]

    events = asyncio.run(asyncio.wait_for(collect(), timeout_s))
    assert len(events) == 1
    return dict(events[0].payload)


def start(cluster: RayHead, name: str, code: str) -> str:
    job_id = submission_id(name, f"trigger-{time.time_ns()}")
    submit(
        connect(cluster.address, cluster.token),
        JobRequest(
            job_id, f'python -c "{code}"', runtime_env({}, ship_code=False), entrypoint_num_cpus=0
        ),
    )
    return job_id


def test_trigger_reports_success(ray_cluster: RayHead, ray_conn: str) -> None:
    job_id = start(ray_cluster, "trig-ok", "print(42)")
    event = first_event(RayJobTrigger(ray_conn, job_id, poll_interval_s=0.5))
    assert event == {"submission_id": job_id, "status": "SUCCEEDED", "message": ""}


def test_trigger_reports_failure(ray_cluster: RayHead, ray_conn: str) -> None:
    job_id = start(ray_cluster, "trig-fail", "raise SystemExit(2)")
    assert first_event(RayJobTrigger(ray_conn, job_id, poll_interval_s=0.5))["status"] == "FAILED"


def test_trigger_reports_a_stopped_job(ray_cluster: RayHead, ray_conn: str) -> None:
    job_id = start(ray_cluster, "trig-stop", "import time; time.sleep(120)")
    client = connect(ray_cluster.address, ray_cluster.token)
    deadline = time.monotonic() + 60
    while get_status(client, job_id) != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
    client.stop_job(job_id)
    assert first_event(RayJobTrigger(ray_conn, job_id, poll_interval_s=0.5))["status"] == "STOPPED"


def test_trigger_reports_an_unknown_job(ray_conn: str) -> None:
    event = first_event(RayJobTrigger(ray_conn, "toolrl-ghost-a1", poll_interval_s=0.5))
    assert event["status"] == "MISSING"


@pytest.mark.parametrize(
    ("password", "says"),
    [("", "none was sent"), ("wrong-token", "refused the token")],
    ids=["no-token", "wrong-token"],
)
def test_trigger_stops_at_once_on_a_refused_token(
    ray_cluster: RayHead, monkeypatch: pytest.MonkeyPatch, password: str, says: str
) -> None:
    job_id = start(ray_cluster, "trig-auth", "print(1)")
    uri = ray_cluster.address.replace("http://", f"http://:{password}@" if password else "http://")
    monkeypatch.setenv("AIRFLOW_CONN_TOOLRL_RAY", uri)
    event = first_event(RayJobTrigger(CONN, job_id, poll_interval_s=0.2), timeout_s=60)
    assert event["status"] == "UNAUTHORIZED"
    assert says in event["message"]
    assert "RAY_AUTH_TOKEN" in event["message"] and ray_cluster.token not in event["message"]


def test_trigger_gives_up_on_an_unreachable_api_with_a_clear_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_TOOLRL_RAY", f"http://127.0.0.1:{free_port()}")
    trigger = RayJobTrigger(CONN, "x", poll_interval_s=0.1, max_unreachable_polls=3)
    event = first_event(trigger, timeout_s=60)
    assert event["status"] == "UNREACHABLE"
    assert "cannot reach the Ray Jobs API" in event["message"]


def test_trigger_serialises_the_connection_id_never_a_token() -> None:
    classpath, kwargs = RayJobTrigger(CONN, "job", 3.0).serialize()
    assert classpath == "toolrl_plugins.triggers.RayJobTrigger"
    assert kwargs == {
        "ray_conn_id": CONN,
        "submission_id": "job",
        "poll_interval_s": 3.0,
        "max_unreachable_polls": 30,
    }
    assert RayJobTrigger(**kwargs).serialize() == (classpath, kwargs)
