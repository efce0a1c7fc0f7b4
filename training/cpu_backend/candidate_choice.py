"""Which model the CPU run hands to the gate: GRPO's, unless it came out measurably worse than
the SFT model it started from.

Why: on the demo's budget GRPO gets a few steps, and a few steps can break what SFT taught.
In a `make demo` from a fresh clone (2026-12-07, AMX host) two GRPO steps took the quick
eval's parseable calls from 75% to 52% on its 48 held-out rows; the candidate was rejected
(67% parseable against the gate's 70%) and the run served nothing. The SFT model it started
from had read 75% on those rows; the gate never saw it. The gate keeps a worse model from
replacing the champion; this keeps a worse model from replacing its own SFT start, so a run
whose RL went wrong still hands over what its SFT earned. It is transformers'
`load_best_model_at_end` in spirit, with two differences: it only ever steps back to SFT
(GRPO's model is the default), and only on a paired interval, not on a point estimate, so
noise alone rarely drops GRPO's model (at most about 15% of the time when GRPO changed
nothing: three one-sided 5% tests; the two models then score alike within noise).

The comparison is the quick eval's: after SFT and after GRPO the same held-out rows run
through the same agent loop (`quick_eval.py`), and each row's result is kept. For pass,
parseable calls and tool selection the paired bootstrap 90% interval of GRPO minus SFT
(`evaluation.paired.paired_against`) is taken over the rows where the figure applies; where
any interval lies wholly below zero, over at least `MIN_CASES` rows, the candidate is the
SFT model. GRPO's checkpoints stay in the run directory either way, and the choice, its
reason and the three intervals go into `cpu_report.json` and the job log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from training.evaluation.paired import difference_text, paired_against
from training.evaluation.scoring import CaseResult

#: The figures compared, by the `CaseResult` field each is paired on.
GUARDED = {
    "pass": "passed",
    "parseable": "parseable",
    "tool_selection": "selection_ok",
}
MIN_CASES = 12
"""Fewer paired rows than this decide nothing: the interval of a handful of rows is wide
enough to hold anything, and its percentile ends are unsteady."""


@dataclass(frozen=True)
class CandidateChoice:
    stage: Literal["grpo", "sft"]
    """The model the run exports: GRPO's, or the SFT model GRPO started from."""
    reason: str
    paired: dict[str, dict[str, float]] = field(default_factory=dict)
    """GRPO minus SFT on the quick eval's rows, per guarded figure."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _percent(figure: dict[str, float]) -> str:
    return f"{difference_text(figure, ' points')} over {int(figure['cases'])} rows"


def choose(sft_cases: Sequence[CaseResult], grpo_cases: Sequence[CaseResult]) -> CandidateChoice:
    """GRPO's model, unless on the rows both answered one guarded figure is worse with its
    whole 90% interval below zero; without rows to compare (no quick eval, a cache from
    before rows were kept, rows that do not match) GRPO's model, saying why."""
    paired = paired_against(sft_cases, grpo_cases, GUARDED) if sft_cases and grpo_cases else {}
    if not any(figure.get("cases") for figure in paired.values()):
        return CandidateChoice(
            "grpo",
            "GRPO's model: there are no quick-eval rows of both stages to compare "
            "(cpu.eval_rows is 0, or the run resumed from an eval written without them)",
            paired,
        )
    worse = [
        name
        for name, figure in paired.items()
        if figure.get("cases", 0) >= MIN_CASES and figure["ci90_high"] < 0
    ]
    if worse:
        detail = "; ".join(f"{name} {_percent(paired[name])}" for name in worse)
        return CandidateChoice(
            "sft",
            f"GRPO's model came out worse than its SFT start on the quick eval ({detail}), so "
            "the candidate is the SFT model; GRPO's checkpoints stay in the run directory",
            paired,
        )
    compared = "; ".join(
        f"{name} {_percent(figure)}" for name, figure in paired.items() if figure.get("cases")
    )
    return CandidateChoice(
        "grpo",
        f"GRPO's model: not measurably worse than its SFT start on the quick eval ({compared})",
        paired,
    )


def continued() -> CandidateChoice:
    """A run with no SFT stage of its own (it continued from the champion with
    `cpu.continue_sft_steps: 0`): GRPO's model, since its start is the champion, and the gate
    already compares the candidate with the champion on more rows."""
    return CandidateChoice(
        "grpo",
        "GRPO's model: this run had no SFT stage of its own (it continued from the champion), "
        "so the gate's comparison with the champion is the check",
    )
