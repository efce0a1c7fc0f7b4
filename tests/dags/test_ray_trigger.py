"""The deferrable wait: RayJobTrigger against a real Ray head fires exactly once with the
job's terminal state (succeeded, failed, stopped), and reports an unreachable API."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from toolrl_plugins.triggers import RayJobTrigger

from testkit.ray_head import free_port
from training.jobs.submit import JobRequest, connect, get_status, runtime_env, submission_id, submit


def first_event(trigger: RayJobTrigger, timeout_s: float = 120) -> dict[str, Any]:
    async def collect() -> list[Any]:
        return [event async for event in trigger.run()]

    events = asyncio.run(asyncio.wait_for(collect(), timeout_s))
    assert len(events) == 1
    return dict(events[0].payload)


def start(address: str, name: str, code: str) -> str:
    job_id = submission_id(name, f"trigger-{time.time_ns()}")
    submit(
        connect(address),
        JobRequest(
            job_id, f'python -c "{code}"', runtime_env({}, ship_code=False), entrypoint_num_cpus=0
        ),
    )
    return job_id


def test_trigger_reports_success(ray_address: str) -> None:
    job_id = start(ray_address, "trig-ok", "print(42)")
    event = first_event(RayJobTrigger(ray_address, job_id, poll_interval_s=0.5))
    assert event == {"submission_id": job_id, "status": "SUCCEEDED", "message": ""}


def test_trigger_reports_failure(ray_address: str) -> None:
    job_id = start(ray_address, "trig-fail", "raise SystemExit(2)")
    assert (
        first_event(RayJobTrigger(ray_address, job_id, poll_interval_s=0.5))["status"] == "FAILED"
    )


def test_trigger_reports_a_stopped_job(ray_address: str) -> None:
    job_id = start(ray_address, "trig-stop", "import time; time.sleep(120)")
    client = connect(ray_address)
    deadline = time.monotonic() + 60
    while get_status(client, job_id) != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
    client.stop_job(job_id)
    assert (
        first_event(RayJobTrigger(ray_address, job_id, poll_interval_s=0.5))["status"] == "STOPPED"
    )


def test_trigger_reports_an_unknown_job(ray_address: str) -> None:
    event = first_event(RayJobTrigger(ray_address, "toolrl-ghost-a1", poll_interval_s=0.5))
    assert event["status"] == "MISSING"


def test_trigger_gives_up_on_an_unreachable_api_with_a_clear_event() -> None:
    trigger = RayJobTrigger(
        f"http://127.0.0.1:{free_port()}", "x", poll_interval_s=0.1, max_unreachable_polls=3
    )
    event = first_event(trigger, timeout_s=60)
    assert event["status"] == "UNREACHABLE"
    assert "cannot reach the Ray Jobs API" in event["message"]


def test_trigger_serialises_for_the_triggerer() -> None:
    classpath, kwargs = RayJobTrigger("http://h:8265", "job", 3.0).serialize()
    assert classpath == "toolrl_plugins.triggers.RayJobTrigger"
    assert RayJobTrigger(**kwargs).serialize() == (classpath, kwargs)
