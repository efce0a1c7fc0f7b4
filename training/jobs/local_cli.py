"""`toolrl train local`: the CPU training stage from a shell (no Ray, no GPU).

It lives beside the job driver because it is one: it goes through the same driver a Ray
job runs (`training.jobs.entry.run` with the `cpu` backend), so the checkpoint restore,
the planned-step check and `result.json` are exactly those of a submitted job. Only typer is
imported at load time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def register_cli(train: typer.Typer) -> None:
    """Add `local` to the `train` command group (the one `training.jobs.cli` returns)."""

    @train.command("local")
    def local(
        spec: Annotated[Path, typer.Option("--spec", help="TrainingSpec YAML file.")],
        workdir: Annotated[
            Path,
            typer.Option(
                "--workdir",
                help="Run folder: relative data paths and checkpoint.run_dir resolve here; "
                "result.json, cpu_report.json and the final model/ land here.",
            ),
        ],
    ) -> None:
        """Train on CPU (TRL SFT + GRPO; the tiny model or SmolLM2; tools as the spec's
        tools.mode says: mock, replay or live); resumes from the last complete checkpoint in
        the workdir. Exit 3 when the planned step was not reached."""
        from training.jobs.entry import EXIT_INCOMPLETE, run
        from training.spec.model import SpecError, load_spec
        from training.spec.resolve import missing_data_files, resolve_paths

        try:
            loaded = load_spec(spec)
        except SpecError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from exc
        missing = missing_data_files(resolve_paths(loaded, workdir.resolve()))
        if missing:
            typer.echo(
                f"error: {spec}: no such data file: {', '.join(missing)} (relative paths "
                f"resolve against --workdir {workdir}; `toolrl data generate` writes a "
                "dataset)",
                err=True,
            )
            raise typer.Exit(2)
        from training.cpu_backend.rollout_budget import RolloutBudgetError

        try:
            result = run(loaded, workdir.resolve(), backend="cpu")
        except RolloutBudgetError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        typer.echo(json.dumps(result.model_dump(mode="json"), indent=2))
        if not result.complete:
            raise typer.Exit(EXIT_INCOMPLETE)
