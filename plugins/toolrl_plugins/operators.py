"""Operators: submit a TrainingSpec to Ray (idempotent per DAG run) and wait for it
(deferrable). Retries belong on these tasks, never on the training itself: a retried
submit finds the job it already started; a failed job fails the wait without retry."""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from toolrl_plugins.hooks import DEFAULT_CONN_ID, RayJobsHook
from toolrl_plugins.triggers import RayJobTrigger


class SubmitRayTrainingOperator(BaseOperator):
    """Submit `spec_path` as a Ray job whose id is derived from the DAG run id."""

    template_fields = ("spec_path", "backend", "workdir")

    def __init__(
        self,
        *,
        spec_path: str,
        backend: str = "verl",
        workdir: str,
        attempt: int = 1,
        ray_conn_id: str = DEFAULT_CONN_ID,
        extra_env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.backend = backend
        self.workdir = workdir
        self.attempt = attempt
        self.ray_conn_id = ray_conn_id
        self.extra_env = extra_env or {}

    def execute(self, context: Any) -> dict[str, Any]:
        """Returns `training.pipeline.contracts.SubmittedJob` as JSON (the task's XCom)."""
        from pathlib import Path

        from training.jobs.submit import (
            JobRequest,
            entrypoint,
            open_attempt,
            runtime_env,
            submission_id,
            submit,
        )
        from training.pipeline.contracts import SubmittedJob
        from training.spec.model import load_spec

        spec = load_spec(Path(self.spec_path))
        run_key = str(context["dag_run"].run_id)
        client = RayJobsHook(self.ray_conn_id).get_client()
        # cleared after a failed job (a Ray worker lost mid-training): the next attempt
        attempt = open_attempt(client, spec.name, run_key, self.attempt)
        job_id = submission_id(spec.name, run_key, attempt)
        # absolute: a run's spec lives on shared storage, not in the shipped code
        spec_file = str(Path(self.spec_path).resolve())
        request = JobRequest(
            job_id,
            entrypoint(spec_file, run_key, self.backend, f"{self.workdir}/{job_id}"),
            runtime_env(os.environ, self.extra_env),
            {"spec_hash": spec.spec_hash()},
        )
        self.log.info("%s", request.describe())
        result = submit(client, request)
        self.log.info(
            "%s %s (%s)",
            "submitted" if result.created else "found existing job",
            result.submission_id,
            result.status,
        )
        job = SubmittedJob(
            submission_id=result.submission_id, result_dir=f"{self.workdir}/{job_id}"
        )
        return job.model_dump(mode="json")


class WaitRayJobOperator(BaseOperator):
    """Defer to RayJobTrigger until the job ends; fail (no retry) unless it succeeded."""

    template_fields = ("submission_id",)

    def __init__(
        self,
        *,
        submission_id: str,
        ray_conn_id: str = DEFAULT_CONN_ID,
        poll_interval_s: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.submission_id = submission_id
        self.ray_conn_id = ray_conn_id
        self.poll_interval_s = poll_interval_s

    def execute(self, context: Any) -> None:
        self.defer(
            trigger=RayJobTrigger(self.ray_conn_id, self.submission_id, self.poll_interval_s),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> str:
        status = event.get("status")
        if status != "SUCCEEDED":
            raise AirflowFailException(
                f"Ray job {event.get('submission_id')} ended {status}. {event.get('message', '')}"
                f" Read its logs: toolrl train logs {event.get('submission_id')}. To resume,"
                " clear submit_training with its downstream tasks: it submits the next"
                " attempt, which continues from the last complete checkpoint."
            )
        return str(event["submission_id"])
