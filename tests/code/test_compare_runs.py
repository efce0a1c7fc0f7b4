"""`benchmarks/compare_runs.py`: two training runs of one dataset, paired case by case, and
refused where they cannot be (a different dataset, a different case set, a missing eval)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from testkit.benchmark_scripts import load_benchmark
from training.evaluation.runner import journal_path
from training.evaluation.scoring import CaseResult


@pytest.fixture(scope="module")
def compare_runs() -> ModuleType:
    return load_benchmark("compare_runs")


def write_run(root: Path, label: str, exact: list[bool], seed: int = 0) -> tuple[Path, Path]:
    """A kept workdir with the SFT and final journals, and the run's result JSON."""
    workdir = root / label
    overall = {"cases": len(exact), "exact_call_accuracy": sum(exact) / len(exact)}
    for model in ("sft", "final"):
        report = workdir / "eval" / f"{model}.json"
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps({"overall": overall}), encoding="utf-8")
        lines = [json.dumps({"fingerprint": "f"})] + [
            CaseResult(
                case_id=f"c{i}", category="single", selection_ok=ok, exact_calls=ok, passed=ok
            ).model_dump_json()
            for i, ok in enumerate(exact)
        ]
        journal_path(report).write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = root / f"{label}.json"
    result.write_text(
        json.dumps(
            {
                "rows": 100,
                "data_seed": seed,
                "pack": "toolrl",
                "settings": [f"cpu.sft_lr={label}"],
                "timings_s": {"sft_s": 1.0},
                "sft": {"steps": 2},
                "grpo": {"rewards": [0.5]},
                "held_out_eval": {"sft": {"overall": overall}, "final": {"overall": overall}},
                "cpu": {"flags": ["avx2"]},
            }
        ),
        encoding="utf-8",
    )
    return result, workdir


def test_each_run_is_paired_against_the_first_on_the_same_cases(
    compare_runs: ModuleType, tmp_path: Path
) -> None:
    base = write_run(tmp_path, "base", [True, True, False, False])
    worse = write_run(tmp_path, "worse", [False, False, False, False])
    out = tmp_path / "out.json"
    argv = ["--run", "base", *map(str, base), "--run", "worse", *map(str, worse)]
    assert compare_runs.main([*argv, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["baseline"] == "base"
    exact = result["paired_against_baseline"]["worse"]["sft"]["exact_call"]
    assert (exact["cases"], exact["before"], exact["after"], exact["difference"]) == (
        4,
        0.5,
        0.0,
        -0.5,
    )
    assert result["runs"]["worse"]["settings"] == ["cpu.sft_lr=worse"]


def test_runs_on_different_datasets_or_case_sets_are_refused(
    compare_runs: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_run(tmp_path, "base", [True, False])
    other_seed = write_run(tmp_path, "seed1", [True, False], seed=1)
    fewer = write_run(tmp_path, "fewer", [True])
    out = tmp_path / "out.json"
    for other in (other_seed, fewer):
        argv = ["--run", "base", *map(str, base), "--run", "x", *map(str, other)]
        assert compare_runs.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "nothing to pair" in err and "same --eval-limit" in err
    assert not out.exists()


def test_a_missing_eval_or_a_single_run_is_a_clear_error(
    compare_runs: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_run(tmp_path, "base", [True])
    out = str(tmp_path / "out.json")
    missing = ["--run", "gone", str(base[0]), str(tmp_path / "nowhere")]
    assert compare_runs.main(["--run", "base", *map(str, base), *missing, "--out", out]) == 2
    assert "--keep DIR" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        compare_runs.main(["--run", "base", *map(str, base), "--out", out])
    assert exited.value.code == 2


def test_a_corrupt_result_or_journal_is_a_clear_error(
    compare_runs: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_run(tmp_path, "base", [True, False])
    other_result, other_workdir = write_run(tmp_path, "other", [True, False])
    out = tmp_path / "out.json"
    argv = ["--run", "base", *map(str, base), "--run", "other"]
    other_result.write_text("{not json", encoding="utf-8")
    assert compare_runs.main([*argv, str(other_result), str(other_workdir), "--out", str(out)]) == 2
    other_result, other_workdir = write_run(tmp_path, "other", [True, False])
    journal = journal_path(other_workdir / "eval" / "sft.json")
    journal.write_text(journal.read_text() + '{"case_id": 3, "sample": "x"}\n', encoding="utf-8")
    assert compare_runs.main([*argv, str(other_result), str(other_workdir), "--out", str(out)]) == 2
    assert capsys.readouterr().err.count("compare_runs:") == 2
    assert not out.exists()
