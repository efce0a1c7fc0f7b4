"""The champion across scheduled runs (`training/ops/demo/history.py`), read from the files
a retraining run leaves: the gate decision and the evaluations of candidate and champion."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from training.ops.demo.history import (
    champion_history,
    held_out_figures,
    history_rows,
    mlflow_metrics,
    write_history,
)


def metrics(exact: float, selection: float, passed: float) -> dict[str, object]:
    return {
        "metrics": {
            "overall": {
                "cases": 96,
                "exact_call_accuracy": exact,
                "tool_selection_accuracy": selection,
                "pass_rate": passed,
            },
            "by_category": {"single": {"cases": 40}, "parallel": {"cases": 20},
                            "multi_step": {"cases": 20}, "irrelevance": {"cases": 16}},
        }
    }  # fmt: skip


def run(root: Path, name: str, order: int, decision: str, candidate: dict, champion: dict | None
        ) -> None:  # fmt: skip
    folder = root / name
    (folder / "gate").mkdir(parents=True)
    (folder / "eval").mkdir()
    path = folder / "gate" / "gate_decision.json"
    path.write_text(json.dumps({"decision": decision, "reasons": []}))
    os.utime(path, (1_000 + order, 1_000 + order))  # runs are ordered by their decisions
    (folder / "eval" / "candidate.json").write_text(json.dumps(candidate))
    if champion is not None:
        (folder / "eval" / "champion.json").write_text(json.dumps(champion))


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    run(tmp_path, "b-first", 1, "promote", metrics(0.50, 0.70, 0.45), None)
    run(tmp_path, "a-second", 2, "reject", metrics(0.40, 0.60, 0.40), metrics(0.52, 0.71, 0.46))
    run(tmp_path, "c-third", 3, "promote", metrics(0.60, 0.80, 0.55), metrics(0.51, 0.70, 0.44))
    return tmp_path


def test_the_champion_after_each_run_in_run_order(pipeline: Path) -> None:
    history = champion_history(pipeline)
    assert [h.run_dir.rsplit("/", 1)[-1] for h in history] == ["b-first", "a-second", "c-third"]
    assert [h.champion for h in history] == ["candidate", "earlier", "candidate"]
    exact = [h.figures["exact_call_accuracy"] for h in history]
    # a rejected candidate leaves the earlier champion, measured on this run's cases
    assert [f.value for f in exact] == [0.50, 0.52, 0.60]
    assert all(f.cases == 80 and f.low < f.value < f.high for f in exact)  # tool cases only
    rows = history_rows(history)
    assert rows[1][:2] == ["2", "earlier"] and rows[2][1] == "candidate (promoted)"
    assert rows[0][2].startswith("50% [") and rows[0][2].endswith("n=80")
    assert ("champion/exact_call_accuracy", 0.6, 3) in mlflow_metrics(history)


def test_a_first_run_rejected_has_no_champion(tmp_path: Path) -> None:
    run(tmp_path, "only", 1, "reject", metrics(0.1, 0.2, 0.1), None)
    (entry,) = champion_history(tmp_path)
    assert entry.champion == "none" and entry.figures == {}
    assert history_rows([entry])[0][2:] == ["-", "-", "-", "-"]
    assert [p.name for p in write_history([entry], tmp_path / "out")] == ["champion_history.json"]


def test_a_rejected_candidates_figures_keep_their_intervals() -> None:
    """What `benchmarks/demo_record.py` records for a rejected candidate: its own figures,
    with case counts and intervals, as the champion's are."""
    figures = held_out_figures(metrics(0.389, 0.45, 0.30))
    assert set(figures) == {"exact_call_accuracy", "tool_selection_accuracy", "pass_rate"}
    selection = figures["tool_selection_accuracy"]
    assert selection.cases == 80 and selection.low < 0.45 < selection.high
    assert figures["pass_rate"].cases == 96
    assert held_out_figures({}) == {} and held_out_figures({"metrics": "broken"}) == {}
    assert held_out_figures({"metrics": {"overall": [1], "by_category": {}}}) == {}
    broken = {"metrics": {"overall": {"cases": 9, "pass_rate": 0.5}, "by_category": {"single": 1}}}
    assert held_out_figures(broken) == {}


def test_history_is_written_as_json_and_a_plot(pipeline: Path, tmp_path: Path) -> None:
    files = write_history(champion_history(pipeline), tmp_path / "reports")
    assert [p.name for p in files] == ["champion_history.json", "champion_history.png"]
    assert files[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads(files[0].read_text())
    assert [r["figures"]["exact_call_accuracy"]["value"] for r in saved] == [0.5, 0.52, 0.6]


def test_unreadable_files_are_skipped_not_fatal(tmp_path: Path) -> None:
    run(tmp_path, "broken", 1, "promote", metrics(0.5, 0.5, 0.5), None)
    (tmp_path / "broken" / "eval" / "candidate.json").write_text("{truncated")
    (entry,) = champion_history(tmp_path)
    assert entry.champion == "candidate" and entry.figures == {}


def test_history_goes_to_mlflow_as_one_run_stepped_by_scheduled_run(
    pipeline: Path, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    from training.ops.demo.history import log_history

    history = champion_history(pipeline)
    files = write_history(history, tmp_path / "reports")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    before = os.environ.get("MLFLOW_TRACKING_URI")
    run_id = log_history(uri, None, history, files)
    assert os.environ.get("MLFLOW_TRACKING_URI") == before  # nothing leaks to later children
    client = MlflowClient(uri)
    steps = client.get_metric_history(run_id, "champion/exact_call_accuracy")
    assert [(m.step, m.value) for m in sorted(steps, key=lambda m: m.step)] == [
        (1, 0.5), (2, 0.52), (3, 0.6),
    ]  # fmt: skip
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert artifacts == {"champion_history.json", "champion_history.png"}


def journal(report: Path, exact: list[bool]) -> None:
    """The runner's journal beside `report`: a header, then one scored case per line."""
    from training.evaluation.scoring import CaseResult

    lines = [json.dumps({"journal": 1, "fingerprint": "f"})] + [
        CaseResult(case_id=f"case-{i}", category="single", exact_calls=hit, selection_ok=hit)
        .model_dump_json()
        for i, hit in enumerate(exact)
    ]  # fmt: skip
    report.with_name(report.name + ".cases.jsonl").write_text("\n".join(lines) + "\n")


def test_each_run_with_a_champion_shows_the_candidates_paired_gain_over_it(
    pipeline: Path,
) -> None:
    # run 3: the champion it was gated against hit 4 of 10 cases, the candidate 7 of the same
    # 10 (it also fixed three and broke none); a case only one of them answered is left out
    eval_dir = pipeline / "c-third" / "eval"
    journal(eval_dir / "champion.json", [True] * 4 + [False] * 6)
    journal(eval_dir / "candidate.json", [True] * 7 + [False] * 3 + [True])
    history = champion_history(pipeline)
    assert history[0].versus_champion is None  # no champion yet: nothing to pair with
    assert history[1].versus_champion is None  # a champion, but no journals to pair
    gain = history[2].versus_champion
    assert gain is not None and gain["cases"] == 10
    assert (gain["before"], gain["after"], gain["difference"]) == (0.4, 0.7, 0.3)
    assert 0 < gain["ci90_low"] <= 0.3 <= gain["ci90_high"]
    rows = history_rows(history)
    assert rows[0][-1] == "-" and rows[2][-1].startswith("+30.0 [") and rows[2][-1].endswith("n=10")
    assert ("candidate_minus_champion/exact_call", 0.3, 3) in mlflow_metrics(history)


def test_a_torn_journal_leaves_the_gain_out_not_the_history(pipeline: Path) -> None:
    eval_dir = pipeline / "c-third" / "eval"
    journal(eval_dir / "champion.json", [True, False])
    (eval_dir / "candidate.json.cases.jsonl").write_text('{"journal": 1}\n{"case_id": "x", "sam')
    history = champion_history(pipeline)
    assert history[2].versus_champion is None and history[2].figures  # the figures still read
