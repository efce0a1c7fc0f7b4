"""The training stage's pictures are written from its report, and the eval HTML embeds them
without external assets; hostile figure files are skipped, never a broken page."""

from __future__ import annotations

from pathlib import Path

from training.cpu_backend.plots import write_all
from training.evaluation.report import EvalReport, EvalSource, render_html

REPORT = {
    "sft": {"losses": [[1, 1.6], [10, 0.4], [20, 0.05]]},
    "grpo": {"rewards": [0.4, 1.1, 0.9], "reward_stds": [1.5, 1.2, 1.4]},
    "evals": {
        "before": {
            "rows": 48,
            "parseable_rate": 0.0,
            "tool_selection_accuracy": 0.0,
            "answer_accuracy": None,  # no case behind it: drawn as 0, not a crash
            "by_category": {"single": {"pass_rate": 0.0}},
        },
        "sft": {
            "rows": 48,
            "parseable_rate": 0.85,
            "tool_selection_accuracy": 0.6,
            "by_category": {"single": {"pass_rate": 0.6}},
        },
    },
}


def test_three_pngs_from_a_report(tmp_path: Path) -> None:
    written = write_all(REPORT, tmp_path)
    assert [p.name for p in written] == ["sft_loss.png", "grpo_reward.png", "eval_before_after.png"]
    for path in written:
        assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 5_000


def test_an_empty_report_writes_nothing(tmp_path: Path) -> None:
    assert write_all({}, tmp_path) == []


def test_the_html_embeds_figures_inline_and_skips_bad_ones(tmp_path: Path) -> None:
    good = write_all(REPORT, tmp_path / "plots")[0]
    fake = tmp_path / "fake.png"
    fake.write_text("<script>alert(1)</script>")
    report = EvalReport(
        created_at="2026-01-01T00:00:00+00:00",
        source=EvalSource(
            endpoint="http://x/v1",
            model="m",
            mode="chat",
            data_path="t",
            data_sha256="s",
            max_turns=4,
        ),
        cases_total=1,
        metrics={"overall": {"pass_rate": 0.5}},
    )
    page = render_html(report, [good, fake, tmp_path / "missing.png"])
    assert "src='data:image/png;base64," in page
    assert "figure fake.png is not a small PNG; skipped" in page
    assert "figure missing.png is missing" in page
    assert "<script>" not in page and "http" not in page.split("<h2>Training</h2>")[1]
