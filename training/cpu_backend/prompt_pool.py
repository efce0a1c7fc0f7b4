"""Which train rows GRPO draws its prompts from: the rows of `cpu.grpo_categories`, and with
`cpu.grpo_fresh_rows` only those its SFT start did not train on.

Why: GRPO learns only from groups whose rollouts score differently. A prompt SFT has
trained on is one the model mostly answers right at every temperature draw, so its group
scores alike and teaches nothing. Measured on SmolLM2-135M (docs/parts/cpu_backend.md):
after 300 SFT steps, which cover the whole 1,790-row train split, every group of 6 of 8 GRPO
steps scored alike and GRPO added +0.0 exact-call points; after 150 steps (two thirds of the
split) 7 of 16 steps were flat and it added +7.6. Drawing GRPO's prompts from the rows SFT
left out makes that split deliberate instead of an accident of where SFT stopped.

`cpu.grpo_own_templates` goes one step further for the categories it names: part of their
train *phrasings* are GRPO's alone. Fresh rows of a template SFT trained on are still solved
(every clarification group of a 150-step start scored alike), so GRPO learns nothing there
while its single-call prompts push every wording towards calling: held-out clarification
fell from 33% to 17% on seed 1. From a 40-step start, where clarification groups still
disagreed, GRPO raised it instead. A wording SFT never saw gives those groups back.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from training.data.packs.split import held_out

PromptRow = dict[str, Any]


def category_frame(train_file: Path, categories: Sequence[str] = ()) -> pd.DataFrame:
    """The train split's prompt columns, only rows of `categories` when any are named; the
    frame's index is each row's position in the file (what `sft.trained_rows` counts)."""
    columns = ["prompt", "reward_model", "extra_info", "category"]
    frame = pd.read_parquet(train_file, columns=columns if categories else columns[:3])
    frame = frame.reset_index(drop=True)
    if categories:
        frame = frame[frame["category"].isin(list(categories))]
        if frame.empty:
            raise ValueError(
                f"{train_file} has no train row of cpu.grpo_categories {sorted(categories)}: "
                "widen the list or regenerate the dataset with those categories"
            )
    return frame


def grpo_template_rows(frame: pd.DataFrame, categories: Sequence[str]) -> frozenset[int]:
    """Positions (the frame's index) of the train rows whose phrasing is GRPO's alone, in
    `categories` (`cpu.grpo_own_templates`). Per intent and language, `split.held_out` (the
    rule that holds templates out for test) picks among that intent's train templates, so
    the choice depends only on the template ids; an intent-language with one train template
    keeps it for SFT. `frame` needs `category` and `template_id`
    (`pack/intent/language/template`)."""
    if not categories:
        return frozenset()
    rows = frame[frame["category"].isin([str(c) for c in categories])]
    groups: dict[str, set[str]] = {}
    for template in rows["template_id"].astype(str):
        groups.setdefault(template.rsplit("/", 1)[0], set()).add(template)
    own = {t for templates in groups.values() for t in held_out(sorted(templates))}
    return frozenset(int(i) for i in rows.index[rows["template_id"].isin(list(own))])


def as_prompts(frame: pd.DataFrame) -> list[PromptRow]:
    """Rows as TRL reads them: chat prompt, ground truth, row index (for tool sessions)."""
    return [
        {
            "prompt": [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt],
            "reward_model": {"ground_truth": str(reward["ground_truth"])},
            "extra_info": {"index": int(extra["index"]), "split": str(extra["split"])},
        }
        for prompt, reward, extra in zip(
            frame["prompt"], frame["reward_model"], frame["extra_info"], strict=True
        )
    ]


@dataclass(frozen=True)
class PromptPool:
    """GRPO's prompts and where they came from (the run's report carries the counts)."""

    rows: list[PromptRow]
    category_rows: int
    """Rows of `cpu.grpo_categories` in the train split (every row when none are named)."""
    fresh_rows: int
    """Of those, rows the SFT start did not train on (all of them when nothing was excluded)."""
    topped_up: int
    """Rows SFT did train on, added at random because fewer fresh rows than GRPO's steps
    draw were left."""
    own_template_rows: int = 0
    """Of the rows drawn from, those whose phrasing SFT never saw (`cpu.grpo_own_templates`)."""

    def describe(self) -> str:
        """One log line: where GRPO's prompts come from."""
        line = (
            f"GRPO draws its prompts from {len(self.rows)} train rows: "
            f"{self.fresh_rows} of the {self.category_rows} in its categories that SFT did "
            "not train on"
        )
        if self.own_template_rows:
            line += f" ({self.own_template_rows} in wordings SFT never saw)"
        return line + (f", and {self.topped_up} it did (too few left)" if self.topped_up else "")

    def as_dict(self) -> dict[str, int]:
        return {
            "drawn_from": len(self.rows),
            "category_rows": self.category_rows,
            "fresh_rows": self.fresh_rows,
            "topped_up": self.topped_up,
            "own_template_rows": self.own_template_rows,
        }


def prompt_pool(
    train_file: Path,
    categories: Sequence[str] = (),
    trained: AbstractSet[int] = frozenset(),
    needed: int = 0,
    seed: int = 0,
    own_templates: AbstractSet[int] = frozenset(),
) -> PromptPool:
    """GRPO's prompt rows: the rows of `categories` whose position is not in `trained`.
    Where fewer than `needed` (GRPO's steps x prompts per step) are left, a seeded sample of
    trained rows fills the pool to `needed`, so no prompt repeats before the pool runs out;
    with nothing trained (or `trained` empty: the option is off) every row of `categories`.
    `own_templates` (`grpo_template_rows`) only counts: SFT never trained on those rows."""
    frame = category_frame(train_file, categories)
    seen = frame.index.isin(list(trained))
    fresh, known = frame[~seen], frame[seen]
    short = max(0, min(needed - len(fresh), len(known)))
    picked = sorted(random.Random(seed).sample(range(len(known)), short))
    pool = pd.concat([fresh, known.iloc[picked]]) if short else fresh
    if pool.empty:  # nothing needed and nothing fresh: every row, as before the option
        pool = frame
    own = int(pool.index.isin(list(own_templates)).sum())
    return PromptPool(as_prompts(pool), len(frame), len(fresh), short, own)
