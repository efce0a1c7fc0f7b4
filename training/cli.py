"""`toolrl`: one command per stage of the retraining loop.

Heavy libraries (pandas, great-expectations, verl, torch) are imported inside the commands,
so `toolrl --help` answers instantly. Every path argument of every command (here and in the
sub-packages' `register_cli` groups) reaches its command absolute, taken from the current
directory (`absolute_path_params`), so a relative path means the same in every library and
process it is handed to (great-expectations wants absolute paths; Airflow's services and Ray
jobs run elsewhere).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from serving.mcp_client.sources import ToolSources


def absolute(value: Any) -> Any:
    """A parsed path (or list of paths) made absolute against the current directory; any
    other value as it is. Symlinks are kept (`os.path.abspath`, not `resolve`): a venv's
    `bin/python` must stay the venv's, not become its base interpreter."""
    if isinstance(value, PurePath):
        return type(value)(os.path.abspath(value))
    if isinstance(value, list | tuple):
        return type(value)(absolute(item) for item in value)
    return value


class _AbsoluteFirst:
    """A parameter callback: the value made `absolute`, then the parameter's own callback."""

    def __init__(self, then: Callable[..., Any] | None) -> None:
        self.then = then

    def __call__(self, ctx: Any, param: Any, value: Any) -> Any:
        value = absolute(value)
        return self.then(ctx, param, value) if self.then is not None else value


def absolute_path_params(command: Any) -> None:
    """Every parameter of `command` and of the commands below it: a path value arrives in
    the command absolute (defaults included; relative ones mean the current directory)."""
    for param in getattr(command, "params", ()):
        if not isinstance(param.callback, _AbsoluteFirst):
            param.callback = _AbsoluteFirst(param.callback)
    for sub in getattr(command, "commands", {}).values():
        absolute_path_params(sub)


class _RootGroup(TyperGroup):
    """`toolrl` itself: typer builds it, with every group and command below it, on each
    invocation; it makes their path parameters absolute (`absolute_path_params`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        absolute_path_params(self)


app = typer.Typer(
    name="toolrl",
    cls=_RootGroup,
    help=(
        "Keep a tool-calling LLM improving with RL: generate and validate tool-call data, "
        "train with verl GRPO (or the CPU backend), evaluate, gate, register, and serve "
        "behind real MCP tools."
    ),
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
)
data_app = typer.Typer(
    help="Synthetic tool-call dataset: generate and validate.", no_args_is_help=True
)
app.add_typer(data_app, name="data")


def _register_stage_commands() -> None:
    """Stage command groups live beside their stage's code; each module imports only typer
    at load time, so `toolrl --help` stays instant."""
    from serving.mcp_client.cli import register_cli as register_tools
    from serving.mcp_server.cli import register_cli as register_mcp
    from training.data.packs.cli import register_cli as register_packs
    from training.evaluation.cli import register_cli as register_eval
    from training.jobs.cli import register_cli as register_train
    from training.jobs.local_cli import register_cli as register_cpu_training
    from training.model.cli import register_cli as register_model
    from training.ops.airflow.cli import register_cli as register_airflow
    from training.registry.cli import register_cli as register_registry
    from training.rewards.cli import register_cli as register_reward
    from training.verl_bridge.cli import register_cli as register_bridge

    register_bridge(register_mcp(app))
    register_packs(register_tools(app, _pipeline_tool_sources))
    register_cpu_training(register_train(app))
    register_reward(app)
    register_eval(app)
    register_registry(app)
    register_model(app)
    register_airflow(app)


def _pipeline_tool_sources() -> tuple[ToolSources, Path]:
    """`tool_sources` of the pipeline config; unset, the project's own server at
    $TOOLRL_MCP_URL (the URL every other command uses). Relative paths in the sources are
    taken from the config file's directory."""
    from serving.mcp_client.base import DEFAULT_URL, TOKEN_ENV, URL_ENV
    from serving.mcp_client.sources import BUILTIN_SERVER, HttpSource, ToolSources
    from training.pipeline.config import CONFIG_ENV, load_pipeline_config

    config = load_pipeline_config()
    source_file = os.environ.get(CONFIG_ENV)
    base_dir = Path(source_file).parent if source_file else Path.cwd()
    if "tool_sources" in config.model_fields_set:
        return config.tool_sources, base_dir
    url = os.environ.get(URL_ENV) or DEFAULT_URL
    return ToolSources(servers={BUILTIN_SERVER: HttpSource(url=url, token_env=TOKEN_ENV)}), base_dir


_register_stage_commands()


@data_app.command("generate")
def data_generate(
    out: Annotated[Path, typer.Option("--out", help="Output directory (created if missing).")],
    n: Annotated[int, typer.Option(help="Total rows, train + test.")] = 2_000,
    seed: Annotated[int, typer.Option(help="Random seed; same seed, same dataset version.")] = 0,
    test_fraction: Annotated[float, typer.Option(help="Share of rows in the test split.")] = 0.1,
    chinese_fraction: Annotated[
        float | None,
        typer.Option(help="Share of rows in Chinese (default: the pack's `languages`, 0.3)."),
    ] = None,
    paraphrase_url: Annotated[
        str | None,
        typer.Option(help="OpenAI-compatible endpoint to paraphrase queries (optional)."),
    ] = None,
    paraphrase_model: Annotated[str, typer.Option(help="Model name for paraphrasing.")] = "default",
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
    pack: Annotated[
        str,
        typer.Option(
            help="Task pack to generate from (a file, or a shipped pack: toolrl, time, memory); "
            "the default, toolrl, is the project's 11 tools, run in-process in mock mode.",
        ),
    ] = "toolrl",
    sources: Annotated[
        Path | None,
        typer.Option(help="Tool sources YAML with the pack's server (default: its `source:`)."),
    ] = None,
) -> None:
    """Generate train.parquet, test.parquet and manifest.json (version = content hash) from a
    task pack, every expected call executed on its server."""
    from training.data.packs.cli import run_pack_generation

    paraphrase = None
    if paraphrase_url:
        from training.data.paraphrase import ParaphraseConfig

        paraphrase = ParaphraseConfig(url=paraphrase_url, model=paraphrase_model)
    run_pack_generation(
        pack,
        out,
        sources,
        n,
        seed,
        test_fraction,
        quiet=quiet,
        chinese_fraction=chinese_fraction,
        paraphrase=paraphrase,
    )


@data_app.command("validate")
def data_validate(
    dataset_dir: Annotated[
        Path, typer.Argument(help="Directory written by `toolrl data generate`.")
    ],
    max_prompt_tokens: Annotated[
        int, typer.Option(help="Token budget per rendered prompt.")
    ] = 2_048,
    category_tolerance: Annotated[
        float, typer.Option(help="Allowed deviation of each category share from its target.")
    ] = 0.08,
    skip_verl: Annotated[
        bool, typer.Option("--skip-verl", help="Skip the verl RLHFDataset load.")
    ] = False,
) -> None:
    """Run the great-expectations suite; exit 1 (with a summary of what failed) on bad data."""
    from training.data.config import ValidationConfig
    from training.data.validate import validate_dataset

    if not dataset_dir.is_dir():
        typer.secho(f"{dataset_dir} is not a directory", fg="red", err=True)
        raise typer.Exit(2)
    config = ValidationConfig(
        max_prompt_tokens=max_prompt_tokens,
        category_tolerance=category_tolerance,
        check_verl_dataset=not skip_verl,
    )
    report = validate_dataset(dataset_dir, config)
    typer.secho(report.summary(), fg="green" if report.success else "red")
    if not report.success:
        typer.echo(
            "The dataset must not be used for training. Fix the generator or the input "
            "files and validate again.",
            err=True,
        )
        raise typer.Exit(1)


@app.command("demo")
def demo(
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="Where the demo writes everything (default: runs/demo, with --pack "
            "runs/demo-PACK)."
        ),
    ] = None,
    rows: Annotated[int, typer.Option(help="Rows in the generated dataset.")] = 2_000,
    keep_running: Annotated[
        bool,
        typer.Option(
            "--keep-running",
            help="Leave every service up afterwards to browse the Airflow and MLflow UIs; "
            "stop them with `toolrl airflow down --workdir WORKDIR`.",
        ),
    ] = False,
    dags_test: Annotated[
        bool,
        typer.Option(
            "--dags-test",
            help="Debug: run each DAG in one process with `airflow dags test` instead of on "
            "Airflow's scheduler, dag-processor and triggerer.",
        ),
    ] = False,
    pack: Annotated[
        str | None,
        typer.Option(
            "--pack",
            help="Run the loop on a task pack (file, or a shipped pack: time, memory): data "
            "generated against its MCP server, training and evaluation on the replay of "
            "the recorded calls, serving with the live server's tools. Default workdir: "
            "runs/demo-PACK.",
        ),
    ] = None,
    sources: Annotated[
        Path | None,
        typer.Option(
            "--sources",
            help="With --pack: tool sources YAML holding the pack's server (default: the "
            "pack's own `source:`).",
        ),
    ] = None,
    runs: Annotated[
        int,
        typer.Option(
            "--runs",
            min=1,
            max=10,
            help="Scheduled runs to go through, each on a fresh dataset, the later ones "
            "continuing from the champion; the champion's figures per run end in a table, "
            "a plot and MLflow.",
        ),
    ] = 1,
    budget_minutes: Annotated[
        float | None,
        typer.Option(
            "--budget-minutes",
            help="Minutes the demo may take after setup; the training steps are scaled to "
            "fit from this CPU's measured step cost (default: 20 with native bf16, 35 on "
            "AVX2-only CPUs; 0: the spec's steps as written).",
        ),
    ] = None,
) -> None:
    """Run the whole retraining loop on this machine: local services on loopback (MLflow, Ray,
    MCP, Airflow's own four), the dataset DAG triggered through Airflow's REST API, retraining
    started by the scheduler from its Asset event, then serve the champion and answer a chat."""
    from training.ops.airflow.services import AirflowServiceError
    from training.ops.demo.airflow_run import AirflowLoopError
    from training.ops.demo.run import DemoError, run_demo
    from training.ops.demo.services import ServiceError

    if workdir is None:  # a pack's champion is not the built-in one
        workdir = Path(f"runs/demo-{Path(pack).stem}" if pack else "runs/demo").absolute()
    if pack and Path(pack).exists():  # a pack file, named for Airflow's services too
        pack = str(Path(pack).absolute())
    try:
        run_demo(
            workdir,
            rows,
            keep_running=keep_running,
            dags_test=dags_test,
            pack=pack,
            pack_sources=sources,
            budget_minutes=budget_minutes,
            runs=runs,
        )
    except (ValueError, DemoError, ServiceError, AirflowLoopError, AirflowServiceError) as exc:
        typer.secho(f"demo failed: {exc}", fg="red", err=True)
        raise typer.Exit(1) from exc
    except KeyboardInterrupt as exc:
        typer.secho("demo interrupted; all services stopped", fg="yellow", err=True)
        raise typer.Exit(130) from exc


if __name__ == "__main__":
    app()
