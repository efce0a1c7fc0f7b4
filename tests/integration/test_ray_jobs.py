"""Submission, polling, logs and stop against a real local Ray head (ray[default])."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from testkit.ray_head import free_port
from training.jobs.submit import (
    JobRequest,
    PackageTooLargeError,
    RayUnavailableError,
    SubmissionConflictError,
    connect,
    get_status,
    open_attempt,
    runtime_env,
    submission_id,
    submit,
)


@pytest.fixture(scope="module")
def ray_client(ray_address: str, ray_token: str) -> Any:
    return connect(ray_address, ray_token)


def wait_for(client: Any, job_id: str, states: set[str], timeout_s: float = 90) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = get_status(client, job_id)
        if status in states:
            return status
        time.sleep(0.5)
    raise AssertionError(f"{job_id} never reached {states}; last {get_status(client, job_id)}")


def request(job_id: str, code: str) -> JobRequest:
    return JobRequest(
        job_id, f'python -c "{code}"', runtime_env({}, ship_code=False), entrypoint_num_cpus=0
    )


def test_job_succeeds_and_logs_are_readable(ray_client: Any) -> None:
    job_id = submission_id("ok", "dag-run-1")
    result = submit(ray_client, request(job_id, "print('trained 3 steps')"))
    assert result.created
    assert wait_for(ray_client, job_id, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    assert "trained 3 steps" in ray_client.get_job_logs(job_id)


def test_retried_submit_never_starts_a_second_job(ray_client: Any) -> None:
    job_id = submission_id("slow", "dag-run-2")
    first = submit(ray_client, request(job_id, "import time; time.sleep(60)"))
    wait_for(ray_client, job_id, {"RUNNING"})
    again = submit(ray_client, request(job_id, "import time; time.sleep(60)"))
    assert first.created and not again.created
    assert again.status == "RUNNING"
    assert [j.submission_id for j in ray_client.list_jobs()].count(job_id) == 1

    assert ray_client.stop_job(job_id)
    assert wait_for(ray_client, job_id, {"STOPPED", "FAILED"}) == "STOPPED"
    with pytest.raises(SubmissionConflictError, match="next attempt number"):
        submit(ray_client, request(job_id, "print(1)"))
    next_attempt = submission_id("slow", "dag-run-2", attempt=2)
    assert next_attempt != job_id
    assert submit(ray_client, request(next_attempt, "print(1)")).created


def test_failing_job_is_reported_failed(ray_client: Any) -> None:
    job_id = submission_id("bad", "dag-run-3")
    submit(ray_client, request(job_id, "raise SystemExit(3)"))
    assert wait_for(ray_client, job_id, {"SUCCEEDED", "FAILED"}) == "FAILED"


def test_a_resubmit_after_a_failed_attempt_opens_the_next_one(ray_client: Any) -> None:
    """After the job of attempt 1 failed (a Ray worker lost mid-training), a cleared submit
    task must start attempt 2, not be refused forever; a succeeded attempt is reused."""
    assert open_attempt(ray_client, "lost", "dag-run-7") == 1  # nothing submitted yet
    first = submission_id("lost", "dag-run-7", 1)
    submit(ray_client, request(first, "raise SystemExit(1)"))
    assert wait_for(ray_client, first, {"SUCCEEDED", "FAILED"}) == "FAILED"
    assert open_attempt(ray_client, "lost", "dag-run-7") == 2
    second = submission_id("lost", "dag-run-7", 2)
    submit(ray_client, request(second, "print('resumed')"))
    assert wait_for(ray_client, second, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    assert open_attempt(ray_client, "lost", "dag-run-7") == 2
    with pytest.raises(SubmissionConflictError, match="attempts"):
        open_attempt(ray_client, "lost", "dag-run-7", first=1, most=1)


def test_unknown_job_has_no_status(ray_client: Any) -> None:
    assert get_status(ray_client, "toolrl-nothing-here-a1") is None


@pytest.mark.timeout(60)  # a connect that retried forever would hang here
def test_cluster_down_is_a_clear_retryable_error() -> None:
    with pytest.raises(RayUnavailableError, match="cannot reach the Ray Jobs API"):
        connect(f"http://127.0.0.1:{free_port()}")


def test_submission_ids_are_deterministic_and_safe() -> None:
    a = submission_id("Qwen3.5 4B/GSPO", "manual__2026-11-29T00:00:00")
    assert a == submission_id("Qwen3.5 4B/GSPO", "manual__2026-11-29T00:00:00")
    assert a.startswith("toolrl-qwen3-5-4b-gspo-") and a.endswith("-a1")
    with pytest.raises(ValueError, match="attempt"):
        submission_id("x", "y", attempt=0)


def test_runtime_env_carries_settings_by_name_and_refuses_secrets() -> None:
    env = {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000", "AWS_SECRET_ACCESS_KEY": "s3cr3t"}
    built = runtime_env(env)
    assert built["env_vars"] == {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"}
    assert ".venv" in built["excludes"]
    described = JobRequest("id", "python -m x", built).describe()
    assert "MLFLOW_TRACKING_URI" in described and "127.0.0.1:5000" not in described
    with pytest.raises(ValueError, match="refusing to put secrets"):
        runtime_env({}, extra_env={"AWS_SECRET_ACCESS_KEY": "s3cr3t"})


def git_checkout(root: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "keep.py").write_text("VALUE = 1\n")
    (root / ".gitignore").write_text("ignored_by_gitignore/\n")
    (root / ".git" / "info" / "exclude").write_text("bulk/\n")
    for folder in ("bulk", "ignored_by_gitignore"):
        (root / folder).mkdir()
        (root / folder / "weights.bin").write_bytes(os.urandom(1024))
    return root


def test_git_ignored_folders_are_not_shipped(ray_client: Any, tmp_path: Path) -> None:
    """Ray itself honours only .gitignore; a folder ignored through .git/info/exclude (the
    demo once failed on 290 MB of them) stays home too."""
    root = git_checkout(tmp_path / "checkout")
    built = runtime_env({}, root=root, ship_code=True)
    assert "/bulk" in built["excludes"]
    code = (
        "import os; assert os.path.exists('keep.py'); "
        "assert not os.path.exists('bulk'); assert not os.path.exists('ignored_by_gitignore')"
    )
    job_id = submission_id("excludes", f"run-{time.time_ns()}")
    submit(ray_client, JobRequest(job_id, f'python -c "{code}"', built, entrypoint_num_cpus=0))
    assert wait_for(ray_client, job_id, {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"


def test_outside_git_the_static_excludes_apply(tmp_path: Path) -> None:
    built = runtime_env({}, root=tmp_path, ship_code=True)
    assert built["working_dir"] == str(tmp_path)
    assert not [p for p in built["excludes"] if p.startswith("/")]


def test_code_ships_from_a_checkout_and_not_from_an_installed_copy(tmp_path: Path) -> None:
    """From the Airflow image toolrl lives in site-packages: shipping that as the job's
    working_dir would upload every installed package (refused over the upload limit); the
    cluster's image has the same release. A checkout (pyproject.toml at its root) ships."""
    assert "working_dir" not in runtime_env({}, root=tmp_path)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'toolrl'\n")
    assert runtime_env({}, root=tmp_path)["working_dir"] == str(tmp_path)


def test_a_package_over_the_upload_limit_is_a_clear_error(ray_client: Any, tmp_path: Path) -> None:
    """Over 100 MiB (random bytes do not compress) the Jobs API answers 413."""
    (tmp_path / "huge.bin").write_bytes(os.urandom(105 * 1024 * 1024))
    built = runtime_env({}, root=tmp_path, ship_code=True)
    job_id = submission_id("too-big", f"run-{time.time_ns()}")
    with pytest.raises(PackageTooLargeError, match="git-ignored files is over the Jobs API"):
        submit(ray_client, JobRequest(job_id, "python -c pass", built, entrypoint_num_cpus=0))
    assert get_status(ray_client, job_id) is None  # nothing was started
