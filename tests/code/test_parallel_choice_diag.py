"""The parallel-choice diagnostic reads the right token: its prefix ends at the first
`</tool_call>` of the reference first turn, where a parallel row's reference goes on with a
newline and a second call and a single row's ends the turn."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest

from testkit.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def diag() -> ModuleType:
    return load_benchmark("diag_parallel_choice")


@pytest.fixture(scope="module")
def data(builtin_data_300: Path) -> Path:
    return builtin_data_300


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> Path:
    return tiny_model_dir


def first_row(data: Path, category: str) -> dict[str, Any]:
    frame = pd.read_parquet(data / "train.parquet")
    return {str(k): v for k, v in frame[frame["category"] == category].iloc[0].items()}


def test_the_prefix_stops_where_the_turn_chooses(diag: ModuleType, data: Path, tiny: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    tools = diag.openai_tools(data)  # a built-in dataset is judged by the catalog: its tools
    assert {tool["function"]["name"] for tool in tools} >= {"get_exchange_rate"}
    after = {}
    for category in ("parallel", "single"):
        ids = diag.first_turn(tokenizer, first_row(data, category), tools)
        prefix = diag.choice_prefix(tokenizer, ids)
        turn = str(tokenizer.decode(prefix)).rsplit("<|im_start|>", 1)[1]
        assert turn.endswith("</tool_call>") and turn.count("<tool_call>") == 1
        after[category] = str(tokenizer.decode(ids[len(prefix) : len(prefix) + 2]))
    assert after["parallel"].startswith("\n<tool_call>")
    assert after["single"].startswith("<|im_end|>")


def test_chances_are_probabilities_with_intervals(diag: ModuleType, data: Path, tiny: Path) -> None:
    figures = diag.measure(tiny, data, rows_per_category=3)
    assert set(figures) == {f"{s}/{c}" for s in ("train", "test") for c in diag.CATEGORIES}
    for value in figures.values():
        low, high = value["ci95"]
        assert value["n"] == 3 and 0.0 <= value["mean"] <= 1.0 and low <= value["mean"] <= high


def test_bad_arguments_are_refused_clearly(
    diag: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        diag.main(["--model", str(tmp_path), "--data", str(tmp_path)])
    assert "has no train.parquet" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        diag.main(["--model", str(tmp_path), "--data", str(tmp_path), "--rows", "1"])
    assert "--rows must be at least 2" in capsys.readouterr().err
