"""Does a GRPO rollout have room for the answer the reward is looking for?

TRL counts `max_completion_length` over the whole multi-turn rollout: every assistant turn
*and* every tool response it appends. A rollout that reaches the limit is cut, and the cut
one has no final answer, so the reward scores it low. When the reference trajectory of a
row (the expected calls, the tools' results, the final answer) does not fit, the correct
behaviour is exactly what gets cut: GRPO then pushes the model away from it. Measured on the
`mcp-server-time` pack with a 256-token limit: every multi-step reference (median 399
tokens) and half of the parallel ones were cut, and 8 GRPO steps took multi-step tool
selection from 98.6% to 56%.

So the run measures every train row's reference trajectory in the model's own tokens
before it spends anything, and refuses a limit that would cut more than
`cpu.max_truncated_fraction` of them, naming the length that fits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serving.renderer import ChatRenderer
from training.cpu_backend.sft import trajectory


class RolloutBudgetError(ValueError):
    """`cpu.max_completion_length` would cut the reference rollouts of too many rows."""


@dataclass(frozen=True)
class RolloutBudget:
    """Reference rollout lengths against the limit, per category and overall."""

    limit: int
    rows: int
    longest: int
    truncated: int
    truncated_by_category: dict[str, tuple[int, int]]
    """category -> (rows cut, rows)."""
    fitting_limit: int
    """The smallest limit that fits every row."""

    @property
    def truncated_fraction(self) -> float:
        return self.truncated / self.rows if self.rows else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "rows": self.rows,
            "longest": self.longest,
            "truncated": self.truncated,
            "truncated_fraction": round(self.truncated_fraction, 4),
            "truncated_by_category": {
                name: {"truncated": cut, "rows": total}
                for name, (cut, total) in sorted(self.truncated_by_category.items())
            },
            "fitting_limit": self.fitting_limit,
        }


def reference_completion_tokens(renderer: ChatRenderer, row: Mapping[Any, Any]) -> int:
    """Tokens after the generation prompt in the row's reference rollout, rendered by the
    one prompt renderer (tool responses included, as the rollout budget counts them)."""
    messages = trajectory(row)
    prompt_turns = len(row["prompt"])
    full = renderer.text(messages, add_generation_prompt=False)
    prompt = renderer.text(messages[:prompt_turns])
    if not full.startswith(prompt):
        # a template that renders the prompt differently once answers follow: count the
        # difference in length, which is what the rollout adds either way
        return max(0, len(renderer.encode(full)) - len(renderer.encode(prompt)))
    return len(renderer.encode(full[len(prompt) :]))


def measure_budget(
    renderer: ChatRenderer, rows: Sequence[Mapping[Any, Any]], limit: int
) -> RolloutBudget:
    lengths: list[tuple[str, int]] = [
        (str(row.get("category") or "unknown"), reference_completion_tokens(renderer, row))
        for row in rows
    ]
    by_category: dict[str, tuple[int, int]] = {}
    for category, length in lengths:
        cut, total = by_category.get(category, (0, 0))
        by_category[category] = (cut + int(length > limit), total + 1)
    longest = max((length for _, length in lengths), default=0)
    return RolloutBudget(
        limit=limit,
        rows=len(lengths),
        longest=longest,
        truncated=sum(length > limit for _, length in lengths),
        truncated_by_category=by_category,
        fitting_limit=longest,
    )


def check_budget(budget: RolloutBudget, max_truncated_fraction: float) -> None:
    """Raise `RolloutBudgetError` naming the categories cut and the limit that fits."""
    if budget.truncated_fraction <= max_truncated_fraction:
        return
    worst = ", ".join(
        f"{name} {cut}/{total}"
        for name, (cut, total) in sorted(budget.truncated_by_category.items())
        if cut
    )
    raise RolloutBudgetError(
        f"cpu.max_completion_length={budget.limit} cuts the reference rollout of "
        f"{budget.truncated} of {budget.rows} train rows ({budget.truncated_fraction:.0%}; "
        f"{worst}); GRPO would score the correct calls of those rows as failures. "
        f"Set cpu.max_completion_length to at least {budget.fitting_limit} (the longest "
        f"reference rollout, tool responses included), or raise cpu.max_truncated_fraction "
        f"(now {max_truncated_fraction:g}) to accept the cut."
    )
