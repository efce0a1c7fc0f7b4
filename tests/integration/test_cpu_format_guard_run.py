"""The format guard on a real (very small) CPU run: an SFT start that does not write the call
format gets more SFT instead of GRPO (`extend`), or ends with the reason (`stop`).

Real pieces: the dataset generator, the tiny Qwen3 with the real vocabulary and template,
TRL's SFT trainer, the MCP server in mock mode on loopback, the quick eval and the gate. The
tiny model after two SFT steps writes no parseable call, so the guard's floor of 100%
parseable makes the verdict certain without depending on what it happens to generate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testkit.dataset_rows import generated_dataset
from training.cpu_backend.format_guard import EXTENSION_DIR
from training.cpu_backend.run import REPORT, run_local
from training.evaluation.gate import Thresholds, decide
from training.evaluation.report import EvalReport, EvalSource
from training.jobs.result import TrainingResult
from training.spec.model import TrainingSpec

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("no_tracking"),
]

SPEC: dict[str, Any] = {
    "name": "cpu-format-guard-test",
    "model": {"path": "tiny://hermes", "call_format": "hermes"},
    "data": {
        "train_files": ["data/train.parquet"],
        "test_files": ["data/test.parquet"],
        "train_batch_size": 2,
    },
    "rollout": {"n": 2, "max_turns": 2},
    "batch": {"ppo_mini_batch_size": 2},
    "checkpoint": {"run_dir": "ckpt", "save_freq": 1, "keep": 2},
    "drift": {"max_malformed_rate": 1.0},
    "cpu": {
        "sft_steps": 2,
        "sft_batch_size": 2,
        "sft_lr": 0.003,
        "grpo_steps": 2,
        "prompts_per_step": 2,
        "max_completion_length": 32,
        "max_truncated_fraction": 1.0,  # tiny-model plumbing test: cut rollouts on purpose
        "eval_rows": 4,
        "eval_max_new_tokens": 12,
        "threads": 2,
        "dtype": "float32",
        "sft_format_min_parseable": 1.0,  # nothing short of every tool case parseable passes
        "sft_format_extend_steps": 3,
    },
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generated_dataset(tmp_path_factory.mktemp("guard-data") / "data", 60)


def run(data: Path, workdir: Path, guard: str) -> tuple[TrainingResult, dict[str, Any]]:
    raw = json.loads(json.dumps(SPEC))
    raw["cpu"]["sft_format_guard"] = guard
    raw["data"]["train_files"] = [str(data / "train.parquet")]
    raw["data"]["test_files"] = [str(data / "test.parquet")]
    result = TrainingResult.model_validate(run_local(TrainingSpec.model_validate(raw), workdir))
    return result, json.loads((workdir / REPORT).read_text())


def gate(result: TrainingResult, accept_sft_only: bool = True) -> list[str]:
    from training.evaluation.gate import RESULT_STOP_REASONS, TrainingOutcome

    outcome = TrainingOutcome(
        planned_final_step=result.planned_step,
        final_step=result.final_step,
        stop_reason=RESULT_STOP_REASONS[result.status],
    )
    source = EvalSource(
        endpoint="http://127.0.0.1:1/v1",
        model="candidate",
        mode="agent",
        data_path="test.parquet",
        data_sha256="0" * 64,
        max_turns=2,
    )
    report = EvalReport(
        created_at="2026-12-07T00:00:00+00:00",
        source=source,
        cases_total=1,
        metrics={"overall": {"pass_rate": 1.0}},
    )
    thresholds = Thresholds(accept_sft_only=accept_sft_only)
    return decide(report, thresholds, None, outcome).reasons


def test_extend_gives_grpo_steps_to_sft_and_ends_sft_only(data: Path, tmp_path: Path) -> None:
    result, report = run(data, tmp_path, "extend")
    guard = report["format_guard"]
    assert guard["action"] == "extend"
    assert guard["parseable_rate"] < 1.0
    assert guard["extend_steps"] == 3 and guard["extend_deadline_s"] is None
    assert guard["extension"]["steps"] == 3
    run_dir = tmp_path / "ckpt"
    assert (run_dir / EXTENSION_DIR / "final" / "COMPLETE").read_text().strip() == "3"
    assert not list(run_dir.glob("global_step_*"))  # no GRPO step was taken
    assert "sft_extended" in report["evals"] and "grpo" not in report["evals"]
    assert result.status == "sft_only" and result.complete and result.reached_planned_step
    assert (result.final_step, result.planned_step) == (0, 0)
    assert "more SFT steps" in result.message
    # the exported candidate is the extension's model, not the first SFT's
    exported = Path(result.merged_model_dir or "")
    assert (exported / "config.json").is_file()
    assert report["grpo"]["steps_trained"] == 0
    assert gate(result) == []
    assert gate(result, accept_sft_only=False) == [
        "training reached final step: SFT-only: the format guard gave GRPO's steps to SFT "
        "(accept_sft_only is false)"
    ]

    # started again: every piece is reused, the verdict and the result are the same
    again, report_again = run(data, tmp_path, "extend")
    assert again == result
    assert report_again["format_guard"]["action"] == "extend"


def test_stop_skips_grpo_and_ends_incomplete_with_the_reason(data: Path, tmp_path: Path) -> None:
    result, report = run(data, tmp_path, "stop")
    assert report["format_guard"]["action"] == "stop"
    assert report["format_guard"]["extension"] is None
    assert not (tmp_path / "ckpt" / EXTENSION_DIR).exists()
    assert not list((tmp_path / "ckpt").glob("global_step_*"))
    assert result.status == "incomplete" and not result.complete
    assert (result.final_step, result.planned_step) == (0, 2)
    assert "GRPO skipped" in result.message and "cpu.sft_format_guard: stop" in result.message
    assert any(reason.startswith("training reached final step") for reason in gate(result))
