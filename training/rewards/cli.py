"""`toolrl reward ...`: score one rollout, or measure format drift over a file of rollouts.

Registered by the lead's `training/cli.py` through `register_cli(app)`. Only typer is
imported at load time; the reward code loads inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def _text(value: str) -> str:
    """`@path` reads a file; anything else is the text itself."""
    return Path(value[1:]).read_text(encoding="utf-8") if value.startswith("@") else value


def register_cli(app: typer.Typer) -> None:
    reward_app = typer.Typer(
        help="Rule reward and format-drift signal for tool-call rollouts.", no_args_is_help=True
    )
    app.add_typer(reward_app, name="reward")

    @reward_app.command("score")
    def score(
        response: Annotated[str, typer.Option(help="Rollout text as verl decodes it, or @file.")],
        ground_truth: Annotated[
            str, typer.Option(help="GroundTruth JSON (reward_model.ground_truth), or @file.")
        ],
        call_format: Annotated[str, typer.Option(help="hermes, qwen3_coder or auto.")] = "auto",
    ) -> None:
        """Print the reward and its components as JSON."""
        from training.rewards.score import compute_score

        try:
            out = compute_score(
                "cli", _text(response), _text(ground_truth), {}, call_format=call_format
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from exc
        typer.echo(json.dumps(out, ensure_ascii=False, indent=2))

    @reward_app.command("drift")
    def drift(
        rollouts: Annotated[Path, typer.Argument(help="JSONL: one rollout string per line.")],
        call_format: Annotated[str, typer.Option(help="hermes, qwen3_coder or auto.")] = "auto",
    ) -> None:
        """Malformed-call rate of a batch and its breakdown by error kind."""
        from serving.toolcalls import CallFormat
        from training.rewards.drift import format_drift

        if call_format not in ("hermes", "qwen3_coder", "auto"):
            raise typer.BadParameter(f"unknown call format {call_format!r}")
        fmt: CallFormat = call_format  # type: ignore[assignment]
        lines = rollouts.read_text(encoding="utf-8").splitlines()
        report = format_drift((json.loads(line) for line in lines if line.strip()), fmt)
        typer.echo(json.dumps(report.to_metrics(), indent=2))
