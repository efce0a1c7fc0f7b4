"""Two models on the same cases: the paired difference, read from the harness's journals.

Every evaluation leaves `<report>.cases.jsonl` beside its report (`runner.journal_path`), one
line per (case, sample). Two models scored on one case set differ by less than their separate
intervals suggest, because the cases they share move both; so a "did this stage help"
question is answered here, case by case, with a paired bootstrap (`report.paired_bootstrap`).
The benchmarks, and the demo's table of scheduled runs, read the same journals through this.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training.evaluation.report import paired_bootstrap
from training.evaluation.runner import journal_path
from training.evaluation.scoring import CaseResult

#: Figure name -> the per-case field of `CaseResult` it is paired on.
PAIRED_FIELDS = {
    "tool_selection": "selection_ok",
    "exact_call": "exact_calls",
    "abstention": "no_call_ok",
}


def difference_text(figure: dict[str, float], unit: str = "") -> str:
    """A `paired_bootstrap` figure in points with its 90% interval, `+7.6 [+3.8, +11.5]`
    (`unit` after the number: `+7.6 points [...]`): the one wording of a paired difference
    (the demo's table, the run's candidate choice)."""
    return (
        f"{figure['difference'] * 100:+.1f}{unit} [{figure['ci90_low'] * 100:+.1f}, "
        f"{figure['ci90_high'] * 100:+.1f}]"
    )


def read_cases(report: Path) -> list[CaseResult]:
    """Sample 0 of every case, from the journal the runner keeps beside `report`."""
    lines = journal_path(report).read_text(encoding="utf-8").splitlines()[1:]  # 1st: header
    cases = [CaseResult.model_validate_json(line) for line in lines if line.strip()]
    return [c for c in cases if c.sample == 0]


def _value(field: bool | float | None) -> float:
    """A per-case figure as a number: a yes/no field is 1 or 0, a share is itself."""
    return 0.0 if field is None else float(field)


def paired_against(
    baseline: Sequence[Any], cases: Sequence[Any], fields: dict[str, str] = PAIRED_FIELDS
) -> dict[str, Any]:
    """This model minus the baseline (the SFT stage, the champion) on the cases both answered:
    by default tool selection and exact call over tool cases, abstention over no-tool cases,
    each with a paired bootstrap 90% interval over the cases where the field applies."""
    before = {c.case_id: c for c in baseline}
    shared = [(before[c.case_id], c) for c in cases if c.case_id in before]

    def paired(field: str) -> dict[str, float]:
        pairs = [(b, a) for b, a in shared if getattr(a, field) is not None]
        return paired_bootstrap(
            [_value(getattr(b, field)) for b, _ in pairs],
            [_value(getattr(a, field)) for _, a in pairs],
        )

    return {name: paired(field) for name, field in fields.items()}


def paired_by_category(
    baseline: Sequence[Any], cases: Sequence[Any], fields: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """`paired_against` within each category: a stage can lift the overall rate while one
    category falls, and a drop outside its interval is what the overall figure hides."""
    categories = sorted({c.category for c in cases})
    figures = {}
    for category in categories:
        paired = paired_against(
            [c for c in baseline if c.category == category],
            [c for c in cases if c.category == category],
            fields,
        )
        figures[category] = {name: p for name, p in paired.items() if p.get("cases")}
    return figures
