"""Validation: a good dataset passes; each kind of bad input fails with the specific check."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from training.data.config import ValidationConfig
from training.data.schema import GroundTruth
from training.data.validate import validate_dataset
from training.data.validation_report import ValidationReport

FAST = ValidationConfig(check_verl_dataset=False)


def failed_names(report: ValidationReport) -> set[str]:
    return {c.name for c in report.failed}


def rewrite(path: Path, edit: Any) -> None:
    frame = pd.read_parquet(path)
    frame = edit(frame)
    frame.to_parquet(path, index=False)


def test_valid_dataset_passes_and_writes_data_docs(
    small_dataset: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, manifest = small_dataset
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    report = validate_dataset(out, ValidationConfig())
    # the verl check's tokenizer and parquet cache are gone once it has run
    assert [p.name for p in scratch.iterdir() if p.name.startswith("toolrl-")] == []
    assert report.success, report.summary()
    assert report.dataset_version == manifest["dataset_version"]
    assert report.data_docs and Path(report.data_docs).is_file()
    assert "toolrl_dataset_rows" in Path(report.data_docs).read_text()
    assert any(c.name == "verl_rlhf_dataset_loads" and c.success for c in report.checks)
    saved = json.loads((out / "validation" / "report.json").read_text())
    assert saved["success"] is True


def test_empty_file_is_reported(dataset_copy: Path) -> None:
    (dataset_copy / "train.parquet").write_bytes(b"")
    report = validate_dataset(dataset_copy, FAST)
    assert not report.success
    assert "train_file_readable" in failed_names(report)
    assert "empty" in report.summary()


def test_truncated_parquet_is_reported(dataset_copy: Path) -> None:
    path = dataset_copy / "test.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    report = validate_dataset(dataset_copy, FAST)
    assert "test_file_readable" in failed_names(report)
    assert "truncated or corrupt" in report.summary()


def test_missing_file_is_reported(dataset_copy: Path) -> None:
    (dataset_copy / "train.parquet").unlink()
    report = validate_dataset(dataset_copy, FAST)
    assert "train_file_readable" in failed_names(report)
    assert "missing" in report.summary()


def test_wrong_schema_is_reported(dataset_copy: Path) -> None:
    rewrite(
        dataset_copy / "train.parquet", lambda f: f.drop(columns=["reward_model", "agent_name"])
    )
    report = validate_dataset(dataset_copy, FAST)
    assert "train_file_readable" in failed_names(report)
    assert "lacks required columns: agent_name, reward_model" in report.summary()


def _edit_truth(frame: pd.DataFrame, change: Any, rows: int = 1) -> pd.DataFrame:
    frame = frame.copy()
    target = frame.index[frame["num_steps"] > 0][:rows]
    for i in target:
        reward = dict(frame.at[i, "reward_model"])
        truth = json.loads(reward["ground_truth"])
        change(truth)
        reward["ground_truth"] = json.dumps(truth)
        frame.at[i, "reward_model"] = reward
    return frame


def test_unknown_tool_is_reported(dataset_copy: Path) -> None:
    def rename(truth: dict[str, Any]) -> None:
        truth["steps"][0][0]["name"] = "search_web"

    rewrite(dataset_copy / "train.parquet", lambda f: _edit_truth(f, rename))
    report = validate_dataset(dataset_copy, FAST)
    assert "expect_column_values_to_be_in_set(tools_known)" in failed_names(report)
    assert "unknown tool(s): search_web" in report.summary()


def test_ground_truth_that_does_not_recompute_is_reported(dataset_copy: Path) -> None:
    def corrupt(truth: dict[str, Any]) -> None:
        truth["results"][0][0] = {"result": "forged"}

    rewrite(dataset_copy / "train.parquet", lambda f: _edit_truth(f, corrupt, rows=3))
    report = validate_dataset(dataset_copy, FAST)
    failing = next(c for c in report.failed if c.name.endswith("(gt_recomputes)"))
    assert failing.detail == "3 unexpected value(s)"
    assert "different results" in report.summary()


def test_invalid_arguments_are_reported(dataset_copy: Path) -> None:
    def break_args(truth: dict[str, Any]) -> None:
        truth["steps"][0][0]["arguments"] = {"nonsense": 1}

    rewrite(dataset_copy / "train.parquet", lambda f: _edit_truth(f, break_args))
    report = validate_dataset(dataset_copy, FAST)
    assert "expect_column_values_to_be_in_set(args_valid)" in failed_names(report)


def test_unparseable_ground_truth_is_reported(dataset_copy: Path) -> None:
    def garble(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        frame.at[frame.index[0], "reward_model"] = {"style": "rule", "ground_truth": "{not json"}
        return frame

    rewrite(dataset_copy / "train.parquet", garble)
    report = validate_dataset(dataset_copy, FAST)
    assert "expect_column_values_to_be_in_set(gt_parses)" in failed_names(report)


def test_duplicate_prompt_is_reported(dataset_copy: Path) -> None:
    rewrite(
        dataset_copy / "train.parquet", lambda f: pd.concat([f, f.iloc[[0]]], ignore_index=True)
    )
    report = validate_dataset(dataset_copy, FAST)
    assert "expect_column_values_to_be_unique(query)" in failed_names(report)


def test_train_test_overlap_is_reported(dataset_copy: Path) -> None:
    train = pd.read_parquet(dataset_copy / "train.parquet")
    leaked = train.iloc[[0]].copy()
    leaked["query"] = leaked["query"].str.upper() + "!!"  # a trivial re-spelling
    leaked["extra_info"] = [{**leaked.iloc[0]["extra_info"], "split": "test", "index": 10**6}]
    prompt = [dict(m) for m in leaked.iloc[0]["prompt"]]
    prompt[-1]["content"] = leaked.iloc[0]["query"]
    leaked["prompt"] = [prompt]
    rewrite(dataset_copy / "test.parquet", lambda f: pd.concat([f, leaked], ignore_index=True))
    report = validate_dataset(dataset_copy, FAST)
    names = failed_names(report)
    assert "expect_column_values_to_be_in_set(overlap_exact)" in names
    assert "expect_column_values_to_be_in_set(overlap_template)" in names


def test_category_coverage_out_of_bounds_is_reported(dataset_copy: Path) -> None:
    rewrite(dataset_copy / "train.parquet", lambda f: f[f["category"] != "multi_step"])
    report = validate_dataset(dataset_copy, FAST)
    assert "expect_column_values_to_be_between(deviation)" in failed_names(report)


def test_prompt_over_token_budget_is_reported(small_dataset: tuple[Path, dict[str, Any]]) -> None:
    report = validate_dataset(
        small_dataset[0], ValidationConfig(max_prompt_tokens=100, check_verl_dataset=False)
    )
    assert "expect_column_values_to_be_between(prompt_tokens)" in failed_names(report)


def test_wrong_agent_name_is_reported(dataset_copy: Path) -> None:
    rewrite(dataset_copy / "train.parquet", lambda f: f.assign(agent_name="single_turn_agent"))
    report = validate_dataset(dataset_copy, ValidationConfig())
    names = failed_names(report)
    assert "expect_column_values_to_be_in_set(agent_name)" in names
    assert "verl_rlhf_dataset_loads" in names


def test_ground_truth_model_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="Extra inputs"):
        GroundTruth.model_validate({"category": "single", "surprise": 1})
