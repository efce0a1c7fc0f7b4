"""`toolrl airflow up | status | down`: Airflow's own services for this project, on loopback.

Register with `register_cli(app)` from training/cli.py. Only typer is imported at load time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

airflow_app = typer.Typer(
    help="Airflow's own services (api-server, scheduler, dag-processor, triggerer) on "
    "loopback, with this project's DAGs, plugins and connections.",
    no_args_is_help=True,
)

WorkdirOption = Annotated[
    Path,
    typer.Option(help="Deployment folder: AIRFLOW_HOME is WORKDIR/airflow, logs WORKDIR/logs."),
]
DEFAULT_WORKDIR = Path("runs/airflow")


@airflow_app.command("up")
def up_command(
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    config: Annotated[
        Path | None,
        typer.Option(
            help="Pipeline config YAML (connections, schedule, data paths); "
            "default: $TOOLRL_PIPELINE_CONFIG or the built-in defaults."
        ),
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="api-server port (default from config: 8080).")
    ] = None,
) -> None:
    """Start the four services and wait until each is healthy. The UI login is generated on
    the first start and printed once; it stays in WORKDIR/airflow/ui_login.json (mode 0600)."""
    import os

    from serving.runtime.ports import free_port
    from training.ops.airflow.layout import UI_USER, AirflowLayout, AirflowPorts
    from training.ops.airflow.services import AirflowServiceError, up
    from training.pipeline.config import CONFIG_ENV, load_pipeline_config

    config_path = config or (Path(os.environ[CONFIG_ENV]) if os.environ.get(CONFIG_ENV) else None)
    try:
        pipeline = load_pipeline_config({CONFIG_ENV: str(config_path)} if config_path else {})
    except (OSError, ValueError) as exc:
        typer.secho(f"error: the pipeline config does not load: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    layout = AirflowLayout(workdir.resolve())
    ports = AirflowPorts(port or pipeline.airflow.api_port, free_port(), free_port())
    typer.echo(f"starting Airflow in {layout.home} ...", err=True)
    try:
        result = up(layout, ports, pipeline, config_path)
    except (AirflowServiceError, ValueError) as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(1) from exc
    deployment = result.deployment
    for name, service in deployment.services.items():
        typer.echo(f"  healthy  {name:<14} pid {service.pid:<7} log {service.log}")
    typer.echo(
        f"healthy in {result.seconds_to_healthy:.0f}s. UI and REST API: {deployment.api_url}"
    )
    if result.new_password:
        typer.secho(
            f"UI login (printed once): {UI_USER} / {result.new_password}  "
            f"(kept in {layout.passwords}, mode 0600)",
            fg="green",
        )
    else:
        typer.echo(f"UI login: user {UI_USER}, password in {layout.passwords}")
    typer.echo(f"stop with: toolrl airflow down --workdir {workdir}")


@airflow_app.command("status")
def status_command(
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    as_json: Annotated[bool, typer.Option("--json", help="Print the states as JSON.")] = False,
) -> None:
    """Each service's state (healthy, unhealthy: alive without a fresh heartbeat, down) and
    its log. Exits 1 unless all four are healthy."""
    from training.ops.airflow.layout import AirflowLayout
    from training.ops.airflow.services import AirflowServiceError, Deployment, service_states

    layout = AirflowLayout(workdir.resolve())
    try:
        deployment = Deployment.load(layout)
    except AirflowServiceError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(1) from exc
    if deployment is None:
        typer.echo(f"no Airflow deployment in {layout.home}: start one with `toolrl airflow up`")
        raise typer.Exit(1)
    states = service_states(deployment)
    if as_json:
        typer.echo(json.dumps({"api_url": deployment.api_url, "services": states}))
    else:
        for name, state in states.items():
            colour = "green" if state == "healthy" else "red"
            log = deployment.services[name].log if name in deployment.services else "-"
            typer.secho(f"  {state:<9} {name:<14} log {log}", fg=colour)
        typer.echo(f"UI and REST API: {deployment.api_url}")
    if any(state != "healthy" for state in states.values()):
        raise typer.Exit(1)


@airflow_app.command("down")
def down_command(workdir: WorkdirOption = DEFAULT_WORKDIR) -> None:
    """Stop the four services (and what `toolrl demo --keep-running` left up beside them).
    Task runners are stopped with their service; the metadata DB and logs stay."""
    from training.ops.airflow.layout import AirflowLayout
    from training.ops.airflow.services import AirflowServiceError, stop, stop_companions

    layout = AirflowLayout(workdir.resolve())
    try:
        stopped = stop(layout) + stop_companions(layout)
    except AirflowServiceError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else f"nothing running in {layout.home}")


def register_cli(app: typer.Typer) -> None:
    app.add_typer(airflow_app, name="airflow")
