"""The training stage's pictures: what people look at before they read a table.

Three PNGs, written beside `cpu_report.json` and logged to the run's MLflow artifacts:
- `sft_loss.png`: the SFT loss per logged step;
- `grpo_reward.png`: the reward per GRPO step, mean with the spread (one standard deviation
  across the step's rollouts) as a band;
- `eval_before_after.png`: the quick eval's headline rates (`evaluation.metrics.
  HEADLINE_METRICS`, the harness's own definitions) and its pass rate per category, before
  training, after SFT and after GRPO, as grouped bars.

matplotlib runs on its non-interactive Agg backend: no display, no fonts from the network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from training.evaluation.metrics import HEADLINE_METRICS

STAGES = (
    ("before", "base model"),
    ("sft", "after SFT"),
    ("sft_extended", "after more SFT"),  # the format guard's extension (format_guard.py)
    ("grpo", "after GRPO"),
)


def _rate(block: Mapping[str, Any], key: str) -> float:
    """A rate of a metric block; a rate with no cases behind it (null) is drawn as 0."""
    value = block.get(key)
    return float(value) if isinstance(value, int | float) else 0.0


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def sft_loss(losses: Sequence[tuple[int, float]], out: Path) -> Path | None:
    if not losses:
        return None
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 3.2), dpi=110)
    steps, values = zip(*losses, strict=True)
    axis.plot(steps, values, marker="o", markersize=3, color="#1f6feb")
    axis.set_yscale("log")
    axis.set_xlabel("SFT step")
    axis.set_ylabel("loss (log scale)")
    axis.set_title("SFT warm start: loss on assistant tokens")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(out)
    plt.close(figure)
    return out


def grpo_reward(means: Sequence[float], stds: Sequence[float], out: Path) -> Path | None:
    if not means:
        return None
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 3.2), dpi=110)
    steps = list(range(1, len(means) + 1))
    spread = list(stds) + [0.0] * (len(means) - len(stds))
    low = [m - s for m, s in zip(means, spread, strict=True)]
    high = [m + s for m, s in zip(means, spread, strict=True)]
    axis.fill_between(steps, low, high, color="#2da44e", alpha=0.2, label="± 1 std (rollouts)")
    axis.plot(steps, means, marker="o", color="#2da44e", label="mean reward")
    axis.set_xlabel("GRPO step")
    axis.set_ylabel("reward")
    axis.set_title("GRPO: reward per step")
    axis.legend(loc="lower right", fontsize=8)
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(out)
    plt.close(figure)
    return out


def before_after(evals: Mapping[str, Mapping[str, Any]], out: Path) -> Path | None:
    present = [(key, label) for key, label in STAGES if evals.get(key)]
    if not present:
        return None
    plt = _pyplot()
    categories = sorted({c for key, _ in present for c in (evals[key].get("by_category") or {})})
    figure, (left, right) = plt.subplots(
        1, 2, figsize=(11, 3.6), dpi=110, gridspec_kw={"width_ratios": [5, max(len(categories), 1)]}
    )
    width = 0.8 / len(present)
    colours = ("#8c959f", "#1f6feb", "#8250df", "#2da44e")
    for index, (key, label) in enumerate(present):
        values = [_rate(evals[key], rate) for rate, _ in HEADLINE_METRICS]
        positions = [i + (index - (len(present) - 1) / 2) * width for i in range(len(values))]
        left.bar(positions, values, width, label=label, color=colours[index % len(colours)])
        by_category = evals[key].get("by_category") or {}
        scores = [_rate(by_category.get(c) or {}, "pass_rate") for c in categories]
        places = [i + (index - (len(present) - 1) / 2) * width for i in range(len(categories))]
        right.bar(places, scores, width, color=colours[index % len(colours)])
    rows = next((int(evals[key].get("rows", 0)) for key, _ in present), 0)
    labels = [label for _, label in HEADLINE_METRICS]
    left.set_xticks(range(len(labels)), labels, fontsize=8)
    left.set_ylim(0, 1)
    left.set_ylabel("rate")
    left.set_title(f"held-out quick eval ({rows} rows)")
    left.legend(fontsize=8)
    right.set_xticks(range(len(categories)), categories, fontsize=8, rotation=20)
    right.set_ylim(0, 1)
    right.set_title("pass rate per category")
    for axis in (left, right):
        axis.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(out)
    plt.close(figure)
    return out


def write_all(report: Mapping[str, Any], plots_dir: Path) -> list[Path]:
    """All three pictures from a `cpu_report.json` payload; returns the files written."""
    plots_dir.mkdir(parents=True, exist_ok=True)
    sft = report.get("sft") or {}
    grpo = report.get("grpo") or {}
    written = [
        sft_loss(
            [(int(s), float(v)) for s, v in sft.get("losses", [])], plots_dir / "sft_loss.png"
        ),
        grpo_reward(
            [float(v) for v in grpo.get("rewards", [])],
            [float(v) for v in grpo.get("reward_stds", [])],
            plots_dir / "grpo_reward.png",
        ),
        before_after(report.get("evals") or {}, plots_dir / "eval_before_after.png"),
    ]
    return [path for path in written if path is not None]
