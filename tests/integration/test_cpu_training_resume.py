"""A real (very small) CPU training run through the job driver, killed mid-run and started
again: the second attempt continues from the last complete checkpoint, with the SFT warm
start, the optimizer, the step count and the data position carried over.

Real pieces: the dataset generator, the tiny Qwen3 with the real vocabulary and template,
TRL's SFT and GRPO trainers, the MCP server in mock mode on loopback (started by the run),
the project's reward, and `python -m training.jobs.entry --backend cpu` as a Ray job runs it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from testkit.dataset_rows import generated_dataset
from training.checkpoints.layout import MARKER, TRACKER
from training.cpu_backend.budget import PIN_FILE as BUDGET_PIN
from training.cpu_backend.compute_dtype import PIN_FILE, choose, cpu_flags
from training.cpu_backend.onednn_cache import CAPACITY_VARIABLE
from training.jobs.result import TrainingResult

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

GRPO_STEPS, SAVE_FREQ, PROMPTS = 4, 2, 2
SPEC: dict[str, Any] = {
    "name": "cpu-resume-test",
    "model": {"path": "tiny://hermes", "call_format": "hermes"},
    "data": {
        "train_files": ["data/train.parquet"],
        "test_files": ["data/test.parquet"],
        "train_batch_size": 2,
    },
    "algorithm": {"loss": "gspo", "use_kl_loss": True, "kl_loss_coef": 0.001},
    "rollout": {"n": 2, "max_turns": 2},
    "batch": {"ppo_mini_batch_size": 2},
    "checkpoint": {"run_dir": "ckpt", "save_freq": SAVE_FREQ, "keep": 2},
    "drift": {"max_malformed_rate": 1.0},  # an untrained model: never stop this run on drift
    "cpu": {
        "sft_steps": 6,
        "sft_batch_size": 2,
        "sft_save_freq": 3,
        "sft_lr": 0.003,
        "grpo_steps": GRPO_STEPS,
        "prompts_per_step": PROMPTS,
        "resample_rounds": 1,  # dynamic sampling on: flat groups replaced by drawn rows
        "grpo_micro_batches": 2,  # each step's update in two backward passes
        "grpo_sft_replay_coef": 1.0,  # with the SFT replay on the first of them
        "max_completion_length": 32,
        "max_truncated_fraction": 1.0,  # tiny-model plumbing test: cut rollouts on purpose
        "eval_rows": 2,
        "eval_max_new_tokens": 12,
        "threads": 2,
        "dtype": "auto",  # chosen from this CPU's flags and pinned across the kill
        "time_budget_s": 3600,  # roomy: the steps fit; the plan (with its probe) is pinned
        "onednn_primitive_cache": 4096,  # the setting reaches the driver's report
    },
}


def driver(workdir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "training.jobs.entry",
        "--spec",
        str(workdir / "spec.yaml"),
        "--run-key",
        "resume-test",
        "--backend",
        "cpu",
        "--workdir",
        str(workdir),
    ]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cpu-run")
    generated_dataset(root / "data", 80)
    (root / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    return root


def wait_for(path: Path, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.is_file():
        if process.poll() is not None:
            raise AssertionError(f"run exited ({process.returncode}) before {path} appeared")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout:.0f}s")
        time.sleep(0.1)


def losses(trainer_state: Path) -> list[float]:
    history = json.loads(trainer_state.read_text())["log_history"]
    return [float(entry["loss"]) for entry in history if "loss" in entry]


def test_killed_run_resumes_from_its_last_checkpoint(workdir: Path) -> None:
    run_dir = workdir / "ckpt"
    log = (workdir / "first.log").open("wb")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop(CAPACITY_VARIABLE, None)  # the spec's cache size, not one this shell chose
    first = subprocess.Popen(driver(workdir), stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(run_dir / f"global_step_{SAVE_FREQ}" / MARKER, first, timeout=300)
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    assert first.returncode == -signal.SIGKILL
    assert not (run_dir / f"global_step_{GRPO_STEPS}" / MARKER).exists()
    assert not (workdir / "result.json").exists()
    sft_final = run_dir / "sft" / "final" / "COMPLETE"
    sft_stamp = sft_final.stat().st_mtime_ns
    plan_pin = run_dir / BUDGET_PIN
    plan_stamp = plan_pin.stat().st_mtime_ns  # planned (and the step timed) by the first run
    tokens_at_kill = json.loads(
        (run_dir / f"global_step_{SAVE_FREQ}" / "actor" / "trainer_state.json").read_text()
    )["num_input_tokens_seen"]

    second = subprocess.run(
        driver(workdir), capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]

    result = TrainingResult.read(workdir)
    assert result.status == "succeeded"
    assert result.final_step == result.planned_step == GRPO_STEPS
    assert result.merged_model_dir and Path(result.merged_model_dir, "model.safetensors").is_file()
    report = json.loads((workdir / "cpu_report.json").read_text())
    assert report["resumed_from"]["grpo"] == SAVE_FREQ
    # the driver sized oneDNN's cache from the spec before its first matmul
    assert report["onednn_primitive_cache"] == SPEC["cpu"]["onednn_primitive_cache"]
    budget = report["time_budget"]  # the step was timed here, before training, and charged
    assert budget["measured_s"] > 0 and 0 < budget["sft_step_s"] < budget["measured_s"]
    assert "measured here" in budget["cost_source"]
    assert (budget["sft_steps"], budget["grpo_steps"]) == (6, GRPO_STEPS)  # the steps fit
    assert report["sft"]["deadline_s"] > 0  # SFT had a time limit; the roomy one never bit
    assert report["sft"]["stopped_by_deadline_at"] is None and report["sft"]["steps"] == 6
    assert report["sft"]["step_s"] == []  # SFT finished before the kill: none trained here
    assert plan_pin.stat().st_mtime_ns == plan_stamp  # the resumed run kept the pin: no probe
    assert report["grpo"]["steps_trained"] == GRPO_STEPS - SAVE_FREQ  # continued, not from 0
    assert report["sft"]["lr_horizon"] is None  # the planned steps fit: the cosine kept its end
    # what this process's GRPO steps cost, and its start before them, for pricing GRPO
    assert len(report["grpo"]["step_s"]) == GRPO_STEPS - SAVE_FREQ
    assert all(seconds > 0 for seconds in report["grpo"]["step_s"])
    assert report["grpo"]["setup_s"] > 0
    assert 0 <= report["grpo"]["flat_batches"] <= GRPO_STEPS - SAVE_FREQ
    resampled = report["grpo"]["resampling"]  # one record per step of the run's history
    assert len(resampled) == GRPO_STEPS
    for step in resampled:
        assert 0 <= step["flat_groups_kept"] <= step["flat_groups_drawn"] <= PROMPTS
        assert step["extra_rollouts"] <= step["flat_groups_drawn"] * 2  # one round, n=2
    assert len(report["grpo"]["zero_std_fractions"]) == GRPO_STEPS
    # one replay term per optimizer step (not per micro-batch), killed run's steps included
    replayed = report["grpo"]["sft_replay_losses"]
    assert len(replayed) == GRPO_STEPS and all(value > 0 for value in replayed)
    # the resident set and the peak after every step, the killed run's steps included
    rss, peaks = report["grpo"]["rss_gib"], report["grpo"]["peak_rss_gib"]
    assert len(rss) == len(peaks) == GRPO_STEPS
    assert all(0 < now <= peak for now, peak in zip(rss, peaks, strict=True))
    assert sft_final.stat().st_mtime_ns == sft_stamp  # the warm start was not redone
    assert set(report["evals"]) == {"before", "sft", "grpo"}
    expected = choose("auto", cpu_flags())
    assert report["compute_dtype"] == {
        "requested": "auto",
        **{"dtype": expected.dtype, "reason": expected.reason},
    }
    assert json.loads((run_dir / PIN_FILE).read_text())["dtype"] == expected.dtype
    # every batch's rollouts were written with their row and reward; a batch the killed run
    # scored after its last checkpoint is scored again, so batches may repeat, never miss
    rollouts = Path(report["grpo"]["rollouts"]).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in rollouts]
    assert {r["batch"] for r in records} == set(range(GRPO_STEPS))
    assert all(isinstance(r["row"], int) and r["text"] for r in records)

    # layout: verl's tracker, markers, pruning to `keep`, data position in data.pt
    assert (run_dir / TRACKER).read_text().strip() == str(GRPO_STEPS)
    steps = sorted(p.name for p in run_dir.glob("global_step_*"))
    assert steps == [f"global_step_{SAVE_FREQ}", f"global_step_{GRPO_STEPS}"]
    data = torch.load(run_dir / f"global_step_{GRPO_STEPS}" / "data.pt", weights_only=True)
    assert data["global_step"] == GRPO_STEPS
    assert data["prompts_consumed"] == GRPO_STEPS * PROMPTS
    assert len(data["malformed"]) == GRPO_STEPS  # drift history carried across the restart
    state = json.loads(
        (run_dir / f"global_step_{GRPO_STEPS}" / "actor" / "trainer_state.json").read_text()
    )
    assert state["global_step"] == GRPO_STEPS
    assert state["num_input_tokens_seen"] > tokens_at_kill

    # the SFT warm start learned (the loss went down), in the same layout under sft/
    sft_steps = sorted((run_dir / "sft").glob("global_step_*"), key=lambda p: int(p.name[12:]))
    sft_losses = losses(sft_steps[-1] / "actor" / "trainer_state.json")
    assert len(sft_losses) >= 3 and sft_losses[-1] < sft_losses[0]

    # the exported model loads as a plain Hugging Face model with the real chat template
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(result.merged_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(result.merged_model_dir)
    assert model.config.model_type == "qwen3"
    assert "<tool_call>" in tokenizer.chat_template
