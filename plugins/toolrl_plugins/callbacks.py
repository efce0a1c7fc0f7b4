"""Failure callbacks that tell the on-call engineer what failed and what to do next."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("toolrl.alerts")

NEXT_STEPS = {
    "validate": "Open the Data Docs report named in the log; fix the generator or its input, "
    "then clear the task.",
    "submit_training": "Check the Ray head (toolrl train status <id>); the submit is idempotent, "
    "clear the task to retry.",
    "wait_training": "Read the job logs (toolrl train logs <id>); re-running the DAG resumes "
    "from the last complete checkpoint.",
}


def failure_message(context: Any) -> str:
    ti = context.get("task_instance") or context.get("ti")
    task_id = getattr(ti, "task_id", "?")
    dag_id = getattr(ti, "dag_id", "?")
    run_id = getattr(context.get("dag_run"), "run_id", "?")
    exception = context.get("exception")
    reason = f"{type(exception).__name__}: {str(exception)[:800]}" if exception else "unknown"
    hint = NEXT_STEPS.get(str(task_id), "See the task log; clearing the task retries it safely.")
    return f"[toolrl] {dag_id}.{task_id} failed in run {run_id}: {reason}\nNext: {hint}"


def on_task_failure(context: Any) -> None:
    logger.error(failure_message(context))
