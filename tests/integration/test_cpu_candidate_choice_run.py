"""The candidate choice on a real (very small) CPU run: the run exports the model the choice
names, says so in its report, its result and its message (`candidate_choice.py`).

Real pieces: the dataset generator, the tiny Qwen3 with the real vocabulary and template,
TRL's SFT and GRPO trainers, the MCP server in mock mode on loopback, the quick eval with its
per-row results. In the second test the choice itself is replaced by a fake that always
names the SFT model (named so below): whether a tiny model's GRPO came out worse is not
something a test can arrange, and what is tested there is that the run follows the choice.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from testkit.dataset_rows import generated_dataset
from testkit.pipeline_specs import tiny_spec
from training.cpu_backend import candidate_choice
from training.cpu_backend.run import REPORT, run_local
from training.evaluation.scoring import CaseResult
from training.jobs.result import TrainingResult
from training.spec.model import TrainingSpec

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("no_tracking"),
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generated_dataset(tmp_path_factory.mktemp("choice-data") / "data", 60)


def run(data: Path, workdir: Path) -> tuple[TrainingResult, dict[str, Any]]:
    raw = tiny_spec("cpu-candidate-choice-test")
    raw["data"]["train_files"] = [str(data / "train.parquet")]
    raw["data"]["test_files"] = [str(data / "test.parquet")]
    raw["cpu"]["eval_rows"] = 4
    result = TrainingResult.model_validate(run_local(TrainingSpec.model_validate(raw), workdir))
    return result, json.loads((workdir / REPORT).read_text())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_run_keeps_grpos_model_it_cannot_tell_worse(data: Path, tmp_path: Path) -> None:
    """Four quick-eval rows decide nothing (`MIN_CASES`): GRPO's model is the candidate, and
    the stages' per-row results are kept in their eval files, not in the report."""
    result, report = run(data, tmp_path)
    assert result.status == "succeeded" and result.candidate_stage == "grpo"
    assert report["candidate"]["stage"] == "grpo"
    assert "not measurably worse" in report["candidate"]["reason"]
    assert set(report["candidate"]["paired"]) == set(candidate_choice.GUARDED)
    assert report["candidate"]["paired"]["pass"]["cases"] == 4
    exported = Path(str(result.merged_model_dir)) / "model.safetensors"
    sft_weights = tmp_path / "ckpt" / "sft" / "final" / "model.safetensors"
    assert digest(exported) != digest(sft_weights)  # GRPO's steps changed the weights
    for stage in ("sft", "grpo"):
        assert "case_results" not in report["evals"][stage]
        kept = json.loads((tmp_path / "ckpt" / f"eval_{stage}.json").read_text())
        rows = [CaseResult.model_validate(row) for row in kept["case_results"]]
        assert len(rows) == report["evals"][stage]["rows"] == 4


def test_a_run_whose_choice_names_sft_exports_the_sft_model(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = "fake choice (this test): GRPO's model came out worse"

    def always_sft(
        sft_cases: list[CaseResult], grpo_cases: list[CaseResult]
    ) -> candidate_choice.CandidateChoice:
        assert sft_cases and grpo_cases  # the run hands both stages' rows to the choice
        return candidate_choice.CandidateChoice("sft", reason)

    monkeypatch.setattr(candidate_choice, "choose", always_sft)
    result, report = run(data, tmp_path)
    assert result.status == "succeeded" and result.candidate_stage == "sft"
    assert report["candidate"] == {"stage": "sft", "reason": reason, "paired": {}}
    assert reason in result.message
    exported = Path(str(result.merged_model_dir)) / "model.safetensors"
    sft_weights = tmp_path / "ckpt" / "sft" / "final" / "model.safetensors"
    assert digest(exported) == digest(sft_weights)
    assert report["grpo"]["steps_trained"] == 2  # GRPO ran; its checkpoints stay
    assert list((tmp_path / "ckpt").glob("global_step_*"))
