"""`toolrl train ...`: plan (validate offline), submit to Ray, status, logs, stop."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

RAY_ADDRESS_HELP = "Ray Jobs API, e.g. http://127.0.0.1:8265 (default: $TOOLRL_RAY_ADDRESS)."


def _address(value: str | None) -> str:
    address = value or os.environ.get("TOOLRL_RAY_ADDRESS")
    if not address:
        raise typer.BadParameter("pass --ray-address or set TOOLRL_RAY_ADDRESS")
    return address


def _client(address: str | None) -> object:
    """A Jobs API client sending $RAY_AUTH_TOKEN (Ray's own variable) when it is set."""
    from training.jobs.submit import RayAuthError, RayUnavailableError, connect

    try:
        return connect(_address(address), os.environ.get("RAY_AUTH_TOKEN") or None)
    except RayAuthError as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(77) from exc  # EX_NOPERM
    except RayUnavailableError as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(75) from exc  # EX_TEMPFAIL: retryable


def _load(spec: Path) -> object:
    from training.spec.model import SpecError, load_spec

    try:
        return load_spec(spec)
    except SpecError as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(2) from exc


def plan_command(
    spec: Annotated[Path, typer.Option(help="TrainingSpec YAML.")],
    out: Annotated[Path | None, typer.Option(help="Also write the plan as JSON.")] = None,
) -> None:
    """Print the verl command line for SPEC and validate it against verl (no GPU)."""
    from training.spec.model import TrainingSpec
    from training.spec.plan import PlanError, plan

    loaded = _load(spec)
    assert isinstance(loaded, TrainingSpec)
    try:
        result = plan(loaded)
    except PlanError as exc:
        typer.secho(f"plan failed: {exc}", fg="red", err=True)
        raise typer.Exit(1) from exc
    typer.echo(result.command())
    for warning in result.warnings:
        typer.secho(f"warning: {warning}", fg="yellow", err=True)
    typer.secho(f"validated by verl: {', '.join(result.checks)}", fg="green", err=True)
    typer.echo(f"spec hash {result.spec_hash}; tool config {result.tool_config_path}", err=True)
    if out:
        out.write_text(json.dumps(result.__dict__, indent=2) + "\n")


def submit_command(
    spec: Annotated[Path, typer.Option(help="TrainingSpec YAML (inside the repo).")],
    run_key: Annotated[str, typer.Option(help="Idempotency key, e.g. the DAG run id.")],
    ray_address: Annotated[str | None, typer.Option(help=RAY_ADDRESS_HELP)] = None,
    attempt: Annotated[int, typer.Option(help="Attempt family; bump after a failure.")] = 1,
    backend: Annotated[str, typer.Option(help="verl (GPU) or cpu (TRL).")] = "verl",
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="Job working directory (shared storage on a cluster; "
            "default: runs/jobs in this checkout, for a local Ray head)."
        ),
    ] = None,
) -> None:
    """Submit SPEC as a Ray job; a retried submit returns the job it already started."""
    from training.jobs.submit import (
        JobRequest,
        SubmissionConflictError,
        entrypoint,
        runtime_env,
        submission_id,
        submit,
    )
    from training.spec.model import TrainingSpec

    loaded = _load(spec)
    assert isinstance(loaded, TrainingSpec)
    job_id = submission_id(loaded.name, run_key, attempt)
    repo = Path(__file__).resolve().parents[2]
    rel = spec.resolve().relative_to(repo)
    job_dir = (workdir or repo / "runs" / "jobs") / job_id
    request = JobRequest(
        job_id,
        entrypoint(str(rel), run_key, backend, str(job_dir)),
        runtime_env(os.environ),
        {"spec_hash": loaded.spec_hash()},
    )
    typer.echo(request.describe())
    client = _client(ray_address)
    try:
        result = submit(client, request)
    except SubmissionConflictError as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(1) from exc
    verb = "submitted" if result.created else "already known"
    typer.echo(f"{verb}: {result.submission_id} ({result.status})")
    typer.echo(f"next: toolrl train status {result.submission_id}")


def status_command(
    job_id: Annotated[str, typer.Argument(help="Submission id.")],
    ray_address: Annotated[str | None, typer.Option(help=RAY_ADDRESS_HELP)] = None,
) -> None:
    """Print the job's status (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED)."""
    from training.jobs.submit import get_status

    status = get_status(_client(ray_address), job_id)
    if status is None:
        typer.secho(f"no job {job_id}", fg="red", err=True)
        raise typer.Exit(1)
    typer.echo(status)


def logs_command(
    job_id: Annotated[str, typer.Argument(help="Submission id.")],
    ray_address: Annotated[str | None, typer.Option(help=RAY_ADDRESS_HELP)] = None,
) -> None:
    """Print the job's driver logs."""
    client = _client(ray_address)
    typer.echo(client.get_job_logs(job_id))  # type: ignore[attr-defined]


def stop_command(
    job_id: Annotated[str, typer.Argument(help="Submission id.")],
    ray_address: Annotated[str | None, typer.Option(help=RAY_ADDRESS_HELP)] = None,
) -> None:
    """Stop the job (checkpoints already saved are kept; resubmit to continue)."""
    client = _client(ray_address)
    stopped = client.stop_job(job_id)  # type: ignore[attr-defined]
    typer.echo("stop requested" if stopped else "job was not running")


def register_cli(app: typer.Typer) -> typer.Typer:
    """Add the `train` group to `app` and return it (other backends add commands to it)."""
    train = typer.Typer(
        help="Training: plan and validate a spec, run it on Ray.", no_args_is_help=True
    )
    app.add_typer(train, name="train")
    train.command("plan")(plan_command)
    train.command("submit")(submit_command)
    train.command("status")(status_command)
    train.command("logs")(logs_command)
    train.command("stop")(stop_command)
    return train
