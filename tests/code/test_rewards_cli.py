"""`toolrl reward score|drift` through typer's runner, on a bare app."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from training.rewards.cli import register_cli
from training.rewards.samples import make_samples, render_xml


def app() -> typer.Typer:
    root = typer.Typer()

    @root.callback()
    def main() -> None:
        """root"""

    register_cli(root)
    return root


def test_score_prints_the_components(tmp_path: Path) -> None:
    sample = make_samples(1, seed=2, malformed_share=0.0)[0]
    (tmp_path / "r.txt").write_text(sample.transcript)
    result = CliRunner().invoke(
        app(),
        [
            "reward",
            "score",
            "--response",
            f"@{tmp_path / 'r.txt'}",
            "--ground-truth",
            sample.ground_truth,
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["malformed_calls"] == 0.0
    assert out["finished"] == 1.0


def test_drift_reads_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    bad = render_xml("get_current_time英文", {})
    path.write_text("\n".join(json.dumps(t) for t in [bad, "no calls"]) + "\n")
    result = CliRunner().invoke(app(), ["reward", "drift", str(path)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["train/format/malformed_rate"] == 1.0
    bad_format = CliRunner().invoke(app(), ["reward", "drift", str(path), "--call-format", "xml"])
    assert bad_format.exit_code != 0
