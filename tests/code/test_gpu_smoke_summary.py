"""The GPU smoke summariser reads figures from verl's own console output. The fixture is an
unedited excerpt of the job log of the H200 run (2 GRPO steps, 2026-11-30)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from testkit.benchmark_scripts import load_benchmark

EXCERPT = Path(__file__).parent / "fixtures" / "verl_h200_job_log_excerpt.txt"


@pytest.fixture(scope="module")
def summary() -> ModuleType:
    return load_benchmark("gpu_verl_smoke")


def test_step_lines_give_timings_throughput_and_numpy_wrapped_metrics(summary: ModuleType) -> None:
    steps = summary.step_metrics(EXCERPT.read_text())
    assert sorted(steps) == [1, 2]
    assert steps[2]["timing_s/gen"] == pytest.approx(2.189015807999965)
    assert steps[2]["perf/throughput"] == pytest.approx(2682.354532287401)
    assert steps[1]["num_turns/mean"] == pytest.approx(3.5625)  # printed as np.float64(3.5625)
    assert steps[1]["num_turns/max"] == 8.0  # printed as np.int32(8)
    assert steps[1]["critic/score/max"] == 3.0


def test_final_validation_block_spread_over_prefixed_lines(summary: ModuleType) -> None:
    metrics = summary.final_validation(EXCERPT.read_text())
    assert metrics["val-core/toolrl/synthetic/reward/mean@1"] == pytest.approx(0.234375)
    assert metrics["val-aux/toolrl/synthetic/ground_truth_match/mean@1"] == pytest.approx(0.390625)
    assert metrics["val-aux/num_turns/mean"] == pytest.approx(3.75)  # the last, '-quoted piece
    assert len(metrics) == 17


@pytest.mark.parametrize(
    ("log", "steps"),
    [
        ("", {}),
        ("step:x - nothing:here", {}),
        ("Final validation metrics: {'a': np.float64(", {}),  # cut mid-write
        ("step:3 - timing_s/step:nan - perf/throughput:inf", {3: {}}),  # non-finite dropped
        ("\x00\xff garbage step:", {}),
        (
            "step:3 - timing_s/step:1.5 - junk - a:b\nstep:4 - timing_s/step:2.0",
            {3: {"timing_s/step": 1.5}, 4: {"timing_s/step": 2.0}},  # the readable pieces
        ),
    ],
)
def test_damaged_logs_give_partial_figures_not_a_crash(
    summary: ModuleType, log: str, steps: dict[int, dict[str, float]]
) -> None:
    assert summary.step_metrics(log) == steps
    assert summary.final_validation(log) == {}


def test_a_run_that_left_nothing_still_summarises(summary: ModuleType, tmp_path: Path) -> None:
    result = summary.summarise(tmp_path / "no-workdir", tmp_path, "FAILED")
    assert result["status"] == "FAILED"
    assert result["steps"] == {} and result["checkpoints"]["steps_saved"] == []
