"""`benchmarks/grpo_price_check.py`: a recorded demo's GRPO step priced again with today's
budget code, against what the step took; records it cannot price are left out, not guessed."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from testkit.benchmark_scripts import load_benchmark
from training.cpu_backend.budget import PROBE_OVER_RUN, STEP_COSTS

AMX = ["amx_bf16", "amx_tile", "avx2", "avx512_bf16", "avx512f", "fma"]


@pytest.fixture(scope="module")
def check() -> ModuleType:
    return load_benchmark("grpo_price_check")


def recorded(step_s: float, planned: float, grpo_s: float, **plan: Any) -> dict[str, Any]:
    return {
        "measured_at_utc": "2026-12-07T15:44:40Z",
        "cpu": {"flags": AMX},
        "time_budget": {
            "dtype": "bfloat16",
            "grpo_steps": 2,
            "sft_step_s": step_s,
            "grpo_step_s": planned,
            "cost_source": "measured here before training: ...; each GRPO step also replays "
            "one SFT batch (+6.27 s)",
            **plan,
        },
        "training_timings_s": {"grpo_s": grpo_s},
    }


def test_an_amx_run_is_priced_at_the_tables_grpo_step_plus_its_replay(check: ModuleType) -> None:
    """The AMX demo of 2026-12-07 15:44: probe ratio 0.66, planned 42.5 s, took 66.2 s."""
    row = check.priced_run(recorded(6.27, 42.5, 132.5))
    table = STEP_COSTS["bfloat16"]
    assert row["cpu_kind"] == "AMX" and row["sft_ratio"] == pytest.approx(6.27 / table.sft_s, 1e-3)
    assert row["actual_step_s"] == 66.2 and row["planned_then_s"] == 42.5
    assert row["priced_now_s"] == pytest.approx(table.grpo_s + 6.27, abs=0.05)
    assert row["actual_over_now"] < row["actual_over_then"]
    assert PROBE_OVER_RUN < 1  # the probe's step is what the record's planned step came from


@pytest.mark.parametrize(
    "plan",
    [
        {"cost_source": "the table: AMD EPYC ..."},  # planned without a probe
        {"grpo_steps": 0},  # no GRPO step trained
        {"dtype": "float16"},  # no table for it
        {"sft_step_s": None},  # a plan pinned before step costs were recorded
    ],
)
def test_a_record_it_cannot_price_is_left_out(check: ModuleType, plan: dict[str, Any]) -> None:
    assert check.priced_run(recorded(6.27, 42.5, 132.5, **plan)) is None


def test_the_script_writes_medians_per_cpu_kind(
    check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "demo_runs.json"
    out = tmp_path / "grpo_price.json"
    entries = [recorded(6.27, 42.5, 132.5), recorded(5.67, 38.5, 90.6), {"label": "no plan"}]
    runs.write_text(json.dumps(entries), encoding="utf-8")
    monkeypatch.setattr("sys.argv", ["grpo_price_check.py", "--runs", str(runs), "--out", str(out)])
    check.main()
    report = json.loads(out.read_text(encoding="utf-8"))
    assert len(report["runs"]) == 2
    amx = report["by_cpu_kind"]["AMX"]
    assert amx["runs"] == 2
    assert amx["median_actual_over_priced_now"] < amx["median_actual_over_planned_then"]
