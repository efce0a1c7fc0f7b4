"""`benchmarks/grpo_trial.py`: two benchmark runs that differ only in GRPO's settings,
paired case by case. What would break: the two GRPO models paired on the wrong cases,
two different SFT starts reported as one, or runs on different datasets paired at all."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from testkit.benchmark_scripts import load_benchmark
from training.evaluation.scoring import CaseResult


@pytest.fixture(scope="module")
def check() -> ModuleType:
    return load_benchmark("grpo_trial")


def case(number: int, exact: bool, answer: str = "ok") -> CaseResult:
    return CaseResult(
        case_id=f"case-{number}",
        category="single" if number % 2 else "multi_step",
        expected_tools=["lookup_price"],
        called_tools=["lookup_price"],
        selection_ok=True,
        exact_calls=exact,
        passed=exact,
        final_answer=answer,
    )


def write_eval(folder: Path, name: str, cases: list[CaseResult]) -> None:
    """A harness report's per-case journal, as the runner keeps it beside the report."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text("{}")
    lines = [json.dumps({"fingerprint": "test"})] + [c.model_dump_json() for c in cases]
    (folder / f"{name}.json.cases.jsonl").write_text("\n".join(lines) + "\n")


def run(seed: int, flat: list[float], pool: dict[str, int] | None = None) -> dict[str, Any]:
    adds = {"cases": 20, "difference": 0.1, "ci90_low": 0.0, "ci90_high": 0.2}
    return {
        "settings": ["cpu.sft_steps=150"],
        "data_seed": seed,
        "pack": "toolrl",
        "cpu": {"flags": ["avx2"]},
        "timings_s": {"grpo_s": 1.0},
        "grpo_adds": {"exact_call": adds},
        "grpo": {"zero_std_fractions": flat, "reward_trend": None, "prompt_pool": pool},
    }


def test_the_trial_model_is_paired_against_the_base_model_on_the_same_cases(
    check: ModuleType, tmp_path: Path
) -> None:
    start = [case(n, exact=n < 10) for n in range(20)]
    write_eval(tmp_path / "base", "sft", start)
    write_eval(tmp_path / "fresh", "sft", start)
    write_eval(tmp_path / "base", "final", [case(n, exact=n < 12) for n in range(20)])
    # the fresh-rows model gets 5 more cases right; listed in another order: paired by id
    write_eval(tmp_path / "fresh", "final", [case(n, exact=n < 17) for n in reversed(range(20))])
    pool = {"drawn_from": 300, "category_rows": 931, "fresh_rows": 300, "topped_up": 0}
    report = check.compare(
        run(1, [1.0, 0.5, 1.0, 0.0]),
        tmp_path / "base",
        run(1, [0.5, 0.5], pool),
        tmp_path / "fresh",
        "fresh_rows",
    )
    assert report["sft_starts_differ_on_cases"] == 0 and report["trial"] == "fresh_rows"
    exact = report["trial_minus_base"]["exact_call"]
    assert exact["cases"] == 20 and exact["difference"] == pytest.approx(0.25)
    assert exact["ci90_low"] > 0
    assert report["trial_minus_base_by_category"]["single"]["exact_call"]["cases"] == 10
    base_flat = report["runs"]["base"]["flat"]
    assert (base_flat["steps"], base_flat["steps_all_groups_flat"]) == (4, 2)
    assert base_flat["mean_flat_group_share"] == pytest.approx(0.625)
    assert report["runs"]["fresh_rows"]["flat"]["prompt_pool"] == pool


def test_two_different_sft_starts_are_reported_as_such(check: ModuleType, tmp_path: Path) -> None:
    write_eval(tmp_path / "base", "sft", [case(n, exact=True) for n in range(6)])
    changed = [case(n, exact=True, answer="other" if n == 2 else "ok") for n in range(5)]
    write_eval(tmp_path / "fresh", "sft", changed)
    for folder in ("base", "fresh"):
        write_eval(tmp_path / folder, "final", [case(n, exact=True) for n in range(6)])
    report = check.compare(run(0, []), tmp_path / "base", run(0, []), tmp_path / "fresh")
    assert report["sft_starts_differ_on_cases"] == 2  # one answer differs, one case is missing
    assert report["runs"]["base"]["flat"]["mean_flat_group_share"] is None


def test_runs_on_different_datasets_are_refused(
    check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, seed in (("a.json", 0), ("b.json", 1)):
        (tmp_path / name).write_text(json.dumps(run(seed, [])))
    argv = ["grpo_trial.py", "--label", "x", "--base", str(tmp_path / "a.json"), "--trial"]
    argv += [str(tmp_path / "b.json"), "--base-eval", "x", "--trial-eval", "y"]
    monkeypatch.setattr("sys.argv", [*argv, "--out", str(tmp_path / "out.json")])
    with pytest.raises(SystemExit, match="share a dataset seed"):
        check.main()
    assert not (tmp_path / "out.json").exists()


def test_the_default_output_is_named_by_the_label_and_odd_labels_are_refused(
    check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for folder in ("base", "trial"):
        write_eval(tmp_path / folder, "sft", [case(n, exact=True) for n in range(4)])
        write_eval(tmp_path / folder, "final", [case(n, exact=n < 2) for n in range(4)])
    (tmp_path / "a.json").write_text(json.dumps(run(1, [1.0])))
    monkeypatch.setattr(check, "RESULTS", tmp_path / "results")
    argv = [
        "grpo_trial.py",
        "--base",
        str(tmp_path / "a.json"),
        "--trial",
        str(tmp_path / "a.json"),
    ]
    argv += ["--base-eval", str(tmp_path / "base"), "--trial-eval", str(tmp_path / "trial")]
    monkeypatch.setattr("sys.argv", [*argv, "--label", "multi_step_prompts"])
    check.main()
    written = json.loads((tmp_path / "results" / "grpo_trial_multi_step_prompts.json").read_text())
    assert set(written["runs"]) == {"base", "multi_step_prompts"}
    assert written["trial_minus_base"]["exact_call"]["difference"] == 0
    assert written["trial_minus_base"]["exact_call_share"]["cases"] == 0, "printed, no crash"
    monkeypatch.setattr("sys.argv", [*argv, "--label", "../escape"])
    with pytest.raises(SystemExit, match="--label"):
        check.main()
