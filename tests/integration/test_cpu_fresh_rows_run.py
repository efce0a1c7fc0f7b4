"""`cpu.grpo_fresh_rows` on a real (very small) CPU run: every GRPO rollout's prompt is a
train row the run's SFT did not train on, and the report says how the pool was drawn.

Real pieces: the dataset generator, the tiny Qwen3 with the real vocabulary and template,
TRL's SFT and GRPO trainers, the MCP server in mock mode on loopback; the rollouts file is
the one GRPO's reward writes for every rollout."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from testkit.dataset_rows import generated_dataset
from testkit.pipeline_specs import tiny_spec
from training.cpu_backend.grpo import ROLLOUTS_FILE
from training.cpu_backend.run import REPORT, run_local
from training.cpu_backend.sft import trained_rows
from training.spec.model import TrainingSpec

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("no_tracking"),
]


def test_grpo_draws_only_rows_its_sft_start_did_not_train_on(tmp_path: Path) -> None:
    data = generated_dataset(tmp_path / "data", 60)
    train_file = data / "train.parquet"
    raw = tiny_spec("cpu-fresh-rows-test")
    raw["data"]["train_files"] = [str(train_file)]
    raw["data"]["test_files"] = [str(data / "test.parquet")]
    raw["cpu"]["grpo_fresh_rows"] = True
    spec = TrainingSpec.model_validate(raw)
    workdir = tmp_path / "run"
    run_local(spec, workdir)
    report = json.loads((workdir / REPORT).read_text())

    trained = trained_rows(spec, train_file, spec.cpu.sft_steps, report["sft"]["steps"])
    assert 0 < len(trained) <= spec.cpu.sft_steps * spec.cpu.sft_batch_size
    frame = pd.read_parquet(train_file, columns=["extra_info"])
    trained_index = {int(frame["extra_info"].iloc[i]["index"]) for i in trained}
    pool = report["grpo"]["prompt_pool"]
    assert pool["category_rows"] == len(frame)  # the tiny spec names no categories
    assert pool["fresh_rows"] == len(frame) - len(trained)
    assert pool["drawn_from"] == pool["fresh_rows"] and pool["topped_up"] == 0

    rollouts = [
        json.loads(line)
        for line in (workdir / "ckpt" / ROLLOUTS_FILE).read_text().splitlines()
        if line.strip()
    ]
    needed = spec.cpu.grpo_steps * spec.cpu.prompts_per_step * spec.rollout.n
    assert len(rollouts) >= needed
    drawn = {record["row"] for record in rollouts}
    assert None not in drawn
    assert not drawn & trained_index
