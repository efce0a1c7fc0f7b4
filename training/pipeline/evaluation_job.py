"""The evaluation as a Ray job: serve the candidate (and the champion), score them, write
the `Evaluation` for the gate.

Why a job: on a cluster Airflow's image is orchestration only (no torch, no model server),
while the Ray nodes run the training image, which has both and sits next to the run dir on
shared storage. `evaluate_on_ray` (Airflow side) writes an `EvaluationRequest` into the run
dir and submits

    python -m training.pipeline.evaluation_job --request RUN/eval/request.json

which runs the same `evaluate_candidate_and_champion` the one-machine demo runs in-process,
and writes `RUN/eval/evaluation.json` beside the request.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from serving.mcp_client.base import TOKEN_ENV
from training.jobs import submit as jobs
from training.pipeline.contracts import Evaluation, EvaluationRequest, TrainingPlan, TrainingResult
from training.pipeline.retraining_stage import StageError, share_with_group

#: The job's answer, beside its request.
EVALUATION_FILE = "evaluation.json"
REQUEST_FILE = "request.json"


def evaluate_on_ray(
    client: Any,
    plan: TrainingPlan,
    result: TrainingResult,
    mcp_url: str,
    tracking_uri: str,
    attempt: int = 1,
    poll_s: float = 5.0,
    timeout_s: float = 6 * 3600,
) -> Evaluation:
    """Submit the evaluation as a Ray job and wait for its `Evaluation`.

    The job id is a function of the run dir and `attempt` (the Airflow task's try), so a
    retried task that finds its job still running, or already succeeded, waits for it or
    reads its answer instead of evaluating twice. A failed job is a `StageError` carrying
    the tail of the job's log."""
    eval_dir = Path(plan.workdir) / "eval"
    eval_dir.mkdir(parents=True, exist_ok=True)
    share_with_group(eval_dir)
    request_file = eval_dir / REQUEST_FILE
    request = EvaluationRequest(
        plan=plan, result=result, mcp_url=mcp_url, tracking_uri=tracking_uri
    )
    partial = request_file.with_suffix(".json.partial")
    partial.write_text(request.model_dump_json(indent=2), encoding="utf-8")
    partial.replace(request_file)
    job_id = jobs.submission_id("eval", plan.workdir, attempt)
    command = ["python", "-m", "training.pipeline.evaluation_job", "--request", str(request_file)]
    job = jobs.JobRequest(
        job_id,
        " ".join(shlex.quote(part) for part in command),
        jobs.runtime_env(os.environ),
        {"run_dir": plan.workdir, "stage": "evaluate"},
    )
    jobs.submit(client, job)
    deadline = time.monotonic() + timeout_s
    status = jobs.get_status(client, job_id)
    while status not in jobs.TERMINAL:
        if time.monotonic() > deadline:
            raise StageError(f"evaluation job {job_id} still {status} after {timeout_s:.0f}s")
        time.sleep(poll_s)
        status = jobs.get_status(client, job_id)
    if status != "SUCCEEDED":
        logs = str(client.get_job_logs(job_id) or "")
        raise StageError(f"evaluation job {job_id} ended {status}; its log ends:\n{logs[-3000:]}")
    return Evaluation.model_validate_json((eval_dir / EVALUATION_FILE).read_text(encoding="utf-8"))


def run(request_file: Path) -> Path:
    from training.pipeline.gate_stage import evaluate_candidate_and_champion

    request = EvaluationRequest.model_validate_json(request_file.read_text(encoding="utf-8"))
    # the token comes from this node's environment (a Secret), never from the shared disk
    token = os.environ.get(TOKEN_ENV) or None
    evaluation = evaluate_candidate_and_champion(
        request.plan, request.result, request.mcp_url, request.tracking_uri, token
    )
    out = request_file.with_name(EVALUATION_FILE)
    partial = out.with_suffix(".json.partial")
    partial.write_text(evaluation.model_dump_json(indent=2), encoding="utf-8")
    partial.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--request", type=Path, required=True, help="EvaluationRequest JSON.")
    args = parser.parse_args(argv)
    print(f"evaluation written to {run(args.request)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
