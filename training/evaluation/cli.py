"""`toolrl eval` and `toolrl gate`. Register with `register_cli(app)` from training/cli.py.

Heavy imports happen inside the commands so `toolrl --help` stays instant.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_THRESHOLDS = Path(__file__).with_name("thresholds.yaml")


def _mcp_defaults() -> tuple[str, str | None]:
    from serving.settings import ServiceSettings

    settings = ServiceSettings.from_env(os.environ)
    token = settings.mcp_token.get_secret_value() if settings.mcp_token else None
    return settings.mcp_url, token


def _evaluate_bfcl(
    endpoint: str,
    model: str,
    out: Path,
    bfcl: str,
    concurrency: int,
    limit: int | None,
    quiet: bool,
    bfcl_root: Path | None,
) -> None:
    """`eval --bfcl CATEGORIES`: the BFCL harness instead of the held-out split; exit 2 when
    BFCL's data is not installed or a category is unknown."""
    from training.evaluation.bfcl import evaluate_bfcl
    from training.evaluation.bfcl_wheel import BfclUnavailableError

    categories = [c.strip() for c in bfcl.split(",") if c.strip()]
    try:
        bfcl_report = evaluate_bfcl(
            endpoint, model, out, categories, concurrency, limit, not quiet, bfcl_root
        )
    except (BfclUnavailableError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(json.dumps(bfcl_report.metrics["by_category"]))
    typer.echo(f"report: {out}")


def eval_command(
    endpoint: Annotated[str, typer.Option(help="OpenAI-compatible base URL (.../v1).")],
    model: Annotated[str, typer.Option(help="Model name the endpoint serves.")],
    out: Annotated[Path, typer.Option(help="Report JSON path (HTML written beside it).")],
    data: Annotated[
        Path | None, typer.Option(help="Held-out split, e.g. DIR/test.parquet.")
    ] = None,
    bfcl: Annotated[
        str | None,
        typer.Option(help="Evaluate on BFCL categories instead, e.g. simple_python,multiple."),
    ] = None,
    bfcl_root: Annotated[
        Path | None, typer.Option(help="Dir of `pip install --no-deps --target DIR bfcl-eval`.")
    ] = None,
    mcp_url: Annotated[
        str | None, typer.Option(help="MCP server (mock mode); default TOOLRL_MCP_URL.")
    ] = None,
    mode: Annotated[str, typer.Option(help="chat (server parses calls) or raw.")] = "chat",
    call_format: Annotated[str, typer.Option(help="hermes, qwen3_coder or auto.")] = "auto",
    tokenizer: Annotated[
        Path | None, typer.Option(help="Model dir for raw prompts and the HTTP 500 fallback.")
    ] = None,
    keep_special_tokens: Annotated[
        bool,
        typer.Option("--keep-special-tokens", help="vLLM raw completions keep call tags."),
    ] = False,
    concurrency: Annotated[int, typer.Option(help="Episodes in flight.")] = 16,
    max_turns: Annotated[int, typer.Option(help="Model responses per episode.")] = 8,
    samples: Annotated[int, typer.Option(help="k for pass^k (1 = off).")] = 1,
    pass_k_cases: Annotated[int, typer.Option(help="Cases sampled k times.")] = 50,
    limit: Annotated[int | None, typer.Option(help="Only the first N cases.")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Discard a previous journal.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Evaluate a served model through the agent loop; resumable; writes JSON + HTML."""
    from pydantic import ValidationError

    from training.evaluation.cases import EvalDataError
    from training.evaluation.runner import EvalConfig, JournalError, evaluate

    if (data is None) == (bfcl is None):
        raise typer.BadParameter("give exactly one of --data and --bfcl")
    if bfcl is not None:
        _evaluate_bfcl(endpoint, model, out, bfcl, concurrency, limit, quiet, bfcl_root)
        return
    default_url, token = _mcp_defaults()
    try:
        config = EvalConfig(
            endpoint=endpoint,
            model=model,
            data=data,
            out=out,
            mcp_url=mcp_url or default_url,
            mcp_token=token,
            mode=mode,
            call_format=call_format,
            tokenizer=tokenizer,
            keep_special_tokens=keep_special_tokens,
            concurrency=concurrency,
            max_turns=max_turns,
            samples=samples,
            pass_k_cases=pass_k_cases,
            limit=limit,
            fresh=fresh,
        )
        report = evaluate(config, progress=not quiet)
    except ValidationError as exc:
        raise typer.BadParameter(str(exc.errors()[0]["msg"])) from exc
    except (EvalDataError, JournalError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    overall = report.metrics["overall"]
    keys = ("cases", "pass_rate", "tool_selection_accuracy", "argument_accuracy", "error_rate")
    typer.echo(json.dumps({k: overall.get(k) for k in keys}))
    typer.echo(f"report: {out} (HTML: {out.with_suffix('.html')})")


def gate_command(
    report: Annotated[Path, typer.Argument(help="Candidate's eval report JSON.")],
    thresholds: Annotated[Path, typer.Option(help="Thresholds YAML.")] = DEFAULT_THRESHOLDS,
    champion_report: Annotated[
        Path | None, typer.Option(help="Current champion's report on the same data.")
    ] = None,
    training_status: Annotated[
        Path | None,
        typer.Option(help="JSON/YAML: planned_final_step, final_step, stop_reason."),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write the decision JSON here.")] = None,
) -> None:
    """Promote or reject, metric by metric. Exit 0 promote, 1 reject, 2 unusable input."""
    from training.evaluation.gate import (
        EXIT_INVALID,
        GateInputError,
        decide,
        load_thresholds,
        load_training_outcome,
    )
    from training.evaluation.report import ReportError, load_report

    try:
        candidate = load_report(report)
        champion = load_report(champion_report) if champion_report else None
        rules = load_thresholds(thresholds)
        outcome = load_training_outcome(training_status) if training_status else None
    except (ReportError, GateInputError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_INVALID) from exc
    decision = decide(candidate, rules, champion, outcome)
    for check in decision.checks:
        mark = "PASS" if check.passed else "FAIL"
        typer.echo(f"{mark}  {check.name}: {check.detail}")
    typer.echo(f"decision: {decision.decision}")
    payload = decision.model_dump_json(indent=2)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(payload)
    raise typer.Exit(decision.exit_code)


def register_cli(app: typer.Typer) -> None:
    """Add `eval` and `gate` to the `toolrl` app."""
    app.command("eval")(eval_command)
    app.command("gate")(gate_command)
