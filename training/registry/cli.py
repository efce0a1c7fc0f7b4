"""`toolrl registry ...` (register, gate, promote, rollback, show). Register with
`register_cli(app)` from training/cli.py. The tracking URI comes from MLFLOW_TRACKING_URI
through serving/settings.py; the model name defaults to TOOLRL_MODEL_NAME."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

registry_app = typer.Typer(
    help="MLflow model registry: register, gate, promote, rollback (aliases).",
    no_args_is_help=True,
)


def _settings() -> tuple[str, str]:
    from serving.settings import ServiceSettings

    settings = ServiceSettings.from_env(os.environ)
    return settings.mlflow_tracking_uri, settings.model_name


def _print(info: object) -> None:
    from training.registry.registry import VersionInfo

    assert isinstance(info, VersionInfo)
    typer.echo(info.model_dump_json(indent=2))


def _fail(exc: Exception) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


@registry_app.command("register")
def register_command(
    model_dir: Annotated[Path, typer.Argument(help="Merged Hugging Face checkpoint dir.")],
    run_key: Annotated[str, typer.Option(help="Idempotency key: the DAG run id.")],
    dataset_version: Annotated[str, typer.Option(help="Dataset version (manifest).")],
    dataset_validation: Annotated[str, typer.Option(help="passed, failed, unknown.")] = "unknown",
    training_run_id: Annotated[str | None, typer.Option(help="Training (MLflow) run id.")] = None,
    spec_hash: Annotated[str | None, typer.Option(help="TrainingSpec hash.")] = None,
    git_sha: Annotated[str | None, typer.Option(help="Code version.")] = None,
    call_format: Annotated[str, typer.Option(help="hermes or qwen3_coder.")] = "hermes",
    eval_report: Annotated[Path | None, typer.Option(help="Eval report JSON.")] = None,
    name: Annotated[str | None, typer.Option(help="Model name; default TOOLRL_MODEL_NAME.")] = None,
) -> None:
    """Register a candidate (alias `challenger`); same run key -> same version."""
    from pydantic import ValidationError

    from training.evaluation.report import ReportError
    from training.registry.registry import Lineage, RegistryError, register_candidate

    uri, default_name = _settings()
    try:
        lineage = Lineage(
            run_key=run_key,
            dataset_version=dataset_version,
            dataset_validation=dataset_validation,
            training_run_id=training_run_id,
            spec_hash=spec_hash,
            git_sha=git_sha,
            call_format=call_format,
        )
        _print(register_candidate(uri, name or default_name, model_dir, lineage, eval_report))
    except (ValidationError, RegistryError, ReportError) as exc:
        raise _fail(exc) from exc


@registry_app.command("gate")
def gate_command(
    version: Annotated[str, typer.Argument(help="Model version the decision is about.")],
    decision: Annotated[Path, typer.Argument(help="Decision JSON from `toolrl gate --out`.")],
    name: Annotated[str | None, typer.Option(help="Model name; default TOOLRL_MODEL_NAME.")] = None,
) -> None:
    """Record the gate's decision; promote to `champion` when it says promote."""
    from training.registry.registry import RegistryError, record_gate

    uri, default_name = _settings()
    try:
        _print(record_gate(uri, name or default_name, version, decision))
    except (RegistryError, OSError, ValueError) as exc:
        raise _fail(exc) from exc


@registry_app.command("promote")
def promote_command(
    version: Annotated[str, typer.Argument(help="Version to make champion.")],
    name: Annotated[str | None, typer.Option(help="Model name; default TOOLRL_MODEL_NAME.")] = None,
) -> None:
    """Move `champion` to VERSION by hand (the old champion keeps `previous`)."""
    from mlflow.exceptions import MlflowException

    from training.registry.registry import RegistryError, promote

    uri, default_name = _settings()
    try:
        _print(promote(uri, name or default_name, version))
    except (RegistryError, MlflowException) as exc:
        raise _fail(exc) from exc


@registry_app.command("rollback")
def rollback_command(
    name: Annotated[str | None, typer.Option(help="Model name; default TOOLRL_MODEL_NAME.")] = None,
) -> None:
    """Move `champion` back to `previous`."""
    from training.registry.registry import RegistryError, rollback

    uri, default_name = _settings()
    try:
        _print(rollback(uri, name or default_name))
    except RegistryError as exc:
        raise _fail(exc) from exc


@registry_app.command("show")
def show_command(
    model_uri: Annotated[str, typer.Argument(help="models:/NAME@ALIAS or models:/NAME/N.")],
) -> None:
    """Which version a URI names now, with its lineage tags."""
    from training.registry.registry import RegistryError, resolve

    uri, _ = _settings()
    try:
        _print(resolve(uri, model_uri))
    except RegistryError as exc:
        raise _fail(exc) from exc


def register_cli(app: typer.Typer) -> None:
    """Add the `registry` group to the `toolrl` app."""
    app.add_typer(registry_app, name="registry")
