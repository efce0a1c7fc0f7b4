"""The champion across scheduled runs: what "keeps improving" means to a user.

Each retraining run leaves its gate decision and the DAG's evaluation of the candidate and of
the champion it was compared with, on the same held-out cases (`RUN/gate/gate_decision.json`,
`RUN/eval/candidate.json`, `RUN/eval/champion.json`). After a run, the champion is the
candidate if the gate promoted it, else the one it was compared with. This reads those files
in run order and gives the champion's held-out figures per run with 90% Wilson intervals: a
table for the terminal, a plot, and JSON (also logged to MLflow by the demo).

Each run's figures are on that run's own held-out cases (fresh data each run), so a change
between rows mixes what training did with which cases were drawn. What a run's training added
is measured where both models answered the same cases: a run that had a champion scored it
beside the candidate, and `versus_champion` is the candidate minus the champion there, paired
case by case (`training.evaluation.paired`).
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from training.evaluation.paired import difference_text, paired_against, read_cases
from training.evaluation.report import rate_denominators, wilson_interval
from training.registry.auth import Identity

#: The figures followed across runs (per-case rates, so each has an interval).
FOLLOWED = (
    ("exact_call_accuracy", "exact call"),
    ("tool_selection_accuracy", "tool selection"),
    ("pass_rate", "pass"),
)


@dataclass(frozen=True)
class Figure:
    value: float
    cases: int
    low: float
    high: float


@dataclass(frozen=True)
class RunFigures:
    run: int
    run_dir: str
    promoted: bool
    champion: str
    """candidate (promoted by this run), earlier (kept) or none (no champion yet)."""
    figures: dict[str, Figure]
    versus_champion: dict[str, float] | None = None
    """Exact call, the candidate minus the champion it was gated against, on this run's same
    cases (paired bootstrap: difference, 90% interval, cases); None without a champion."""


def _read(path: Path) -> dict[str, Any]:
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return payload if isinstance(payload, dict) else {}


def held_out_figures(report: dict[str, Any]) -> dict[str, Figure]:
    """The followed figures of one evaluation report (`RUN/eval/candidate.json`), each with
    its case count and 90% Wilson interval; those the report lacks are left out, and a report
    whose metrics are not the harness's shape gives none."""
    metrics = report.get("metrics")
    overall = metrics.get("overall") if isinstance(metrics, dict) else None
    if not isinstance(metrics, dict) or not isinstance(overall, dict):
        return {}
    try:
        counts = rate_denominators(metrics)
    except (AttributeError, TypeError, ValueError):  # by_category entries not the harness's
        return {}
    found = {}
    for key, _ in FOLLOWED:
        value = overall.get(key)
        if isinstance(value, int | float):
            low, high = wilson_interval(float(value), counts.get(key, 0))
            found[key] = Figure(round(float(value), 4), counts.get(key, 0), round(low, 4),
                                round(high, 4))  # fmt: skip
    return found


def _versus_champion(eval_dir: Path) -> dict[str, float] | None:
    """Exact call, candidate minus champion on the same cases, from the gate's two journals."""
    try:
        paired = paired_against(
            read_cases(eval_dir / "champion.json"), read_cases(eval_dir / "candidate.json")
        )
    except (OSError, ValueError):  # no champion this run, or a journal that cannot be read
        return None
    exact = paired["exact_call"]
    return exact if exact.get("cases") else None


def champion_history(pipeline: Path) -> list[RunFigures]:
    """The champion's figures after each retraining run under `pipeline`, oldest first."""
    decisions = sorted(pipeline.rglob("gate_decision.json"), key=lambda p: p.stat().st_mtime)
    history = []
    for index, decision_path in enumerate(decisions, start=1):
        run_dir = decision_path.parent.parent
        promoted = _read(decision_path).get("decision") == "promote"
        candidate = _read(run_dir / "eval" / "candidate.json")
        earlier = _read(run_dir / "eval" / "champion.json")
        if promoted:
            champion, figures = "candidate", held_out_figures(candidate)
        elif earlier:
            champion, figures = "earlier", held_out_figures(earlier)
        else:
            champion, figures = "none", {}
        history.append(
            RunFigures(
                index,
                str(run_dir),
                promoted,
                champion,
                figures,
                _versus_champion(run_dir / "eval") if earlier else None,
            )
        )
    return history


#: The table's last column: what the run's training added, where it can be measured.
VERSUS_CHAMPION_LABEL = "exact call, candidate - champion (same cases)"


def _gain_cell(gain: dict[str, float] | None) -> str:
    if gain is None:
        return "-"
    return f"{difference_text(gain)} n={int(gain['cases'])}"


def history_rows(history: list[RunFigures]) -> list[list[str]]:
    """One row per run: run, what the champion is, each followed figure with its interval,
    and the candidate's paired gain over the champion it was gated against (points)."""
    rows = []
    for entry in history:
        cells = [str(entry.run), entry.champion + (" (promoted)" if entry.promoted else "")]
        for key, _ in FOLLOWED:
            figure = entry.figures.get(key)
            cells.append(
                "-"
                if figure is None
                else f"{figure.value:.0%} [{figure.low:.0%}, {figure.high:.0%}] n={figure.cases}"
            )
        cells.append(_gain_cell(entry.versus_champion))
        rows.append(cells)
    return rows


def write_history(history: list[RunFigures], out_dir: Path) -> list[Path]:
    """`champion_history.json` and, with matplotlib, `champion_history.png` in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "champion_history.json"]
    written[0].write_text(json.dumps([asdict(h) for h in history], indent=2), encoding="utf-8")
    if not any(h.figures for h in history):
        return written
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(6.4, 3.6))
    for key, label in FOLLOWED:
        points = [(h.run, h.figures[key]) for h in history if key in h.figures]
        if not points:
            continue
        runs = [run for run, _ in points]
        values = [f.value for _, f in points]
        errors = [[f.value - f.low for _, f in points], [f.high - f.value for _, f in points]]
        axes.errorbar(runs, values, yerr=errors, marker="o", capsize=4, label=label)
    axes.set_xlabel("scheduled run")
    axes.set_ylabel("champion, held-out (90% interval)")
    axes.set_xticks([h.run for h in history])
    axes.set_ylim(0, 1)
    axes.legend(loc="lower right")
    axes.set_title("The champion after each scheduled run")
    figure.tight_layout()
    png = out_dir / "champion_history.png"
    figure.savefig(png, dpi=120)
    pyplot.close(figure)
    return [*written, png]


def mlflow_metrics(history: list[RunFigures]) -> list[tuple[str, float, int]]:
    """(name, value, step = run) for MLflow: the champion's figures per run."""
    return [
        (f"champion/{key}", figure.value, entry.run)
        for entry in history
        for key, figure in entry.figures.items()
    ] + [
        ("candidate_minus_champion/exact_call", entry.versus_champion["difference"], entry.run)
        for entry in history
        if entry.versus_champion is not None
    ]


def log_history(
    tracking_uri: str, identity: Identity | None, history: list[RunFigures], files: list[Path]
) -> str:
    """The champion's figures per run as one MLflow run (metric step = scheduled run) in the
    `champion-history` experiment, with the table's JSON and plot; returns its run id.
    Through a client of its own: no tracking URI or experiment is left set in this process
    (or in the environment its children inherit)."""
    from mlflow.tracking import MlflowClient

    with identity.acting() if identity else nullcontext():
        client = MlflowClient(tracking_uri)
        experiment = client.get_experiment_by_name("champion-history")
        experiment_id = (
            experiment.experiment_id if experiment else client.create_experiment("champion-history")
        )
        run = client.create_run(
            experiment_id, run_name=f"champion over {len(history)} scheduled runs"
        )
        run_id = str(run.info.run_id)
        try:
            for name, value, step in mlflow_metrics(history):
                client.log_metric(run_id, name, value, step=step)
            for path in files:
                client.log_artifact(run_id, str(path))
        except Exception:
            client.set_terminated(run_id, "FAILED")
            raise
        client.set_terminated(run_id)
        return run_id
