"""`cpu.grpo_categories`: GRPO draws its prompts only from the categories named, so RL can aim
at what the SFT model gets wrong (the SFT-40 model over-called on 23 of 67 single rows and
on 20 of 21 clarification rows). Measured: that fixed single rows, and multi-step rows still
collapsed, as after 16 steps over every category (docs/parts/cpu_backend.md)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from training.cpu_backend.prompt_pool import prompt_pool
from training.data.packs.generate import generate_builtin_dataset
from training.spec.model import SpecError, load_spec, with_settings

SPEC = Path(__file__).resolve().parents[2] / "training" / "specs" / "cpu_smollm2.yaml"


@pytest.fixture(scope="module")
def train_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grpo-categories")
    generate_builtin_dataset(root, n=300, seed=5, progress=False)
    return root / "train.parquet"


def test_rows_come_only_from_the_categories_named(train_file: Path) -> None:
    frame = pd.read_parquet(train_file, columns=["category", "extra_info"])
    spec = with_settings(load_spec(SPEC), ["cpu.grpo_categories=[single, clarification]"])
    rows = prompt_pool(train_file, spec.cpu.grpo_categories).rows
    indices = frame["extra_info"].map(lambda e: int(e["index"]))
    by_index = dict(zip(indices, frame["category"], strict=True))
    kept = {by_index[row["extra_info"]["index"]] for row in rows}
    assert kept == {"single", "clarification"}
    expected = int(frame["category"].isin(["single", "clarification"]).sum())
    assert len(rows) == expected > 0
    assert len(prompt_pool(train_file).rows) == len(frame), "no list: every row"


def test_a_list_no_train_row_matches_is_a_clear_error(train_file: Path, tmp_path: Path) -> None:
    frame = pd.read_parquet(train_file)
    only_single = tmp_path / "train.parquet"
    frame[frame["category"] == "single"].to_parquet(only_single, index=False)
    with pytest.raises(ValueError, match=r"no train row of cpu\.grpo_categories"):
        prompt_pool(only_single, ["parallel"])


@pytest.mark.parametrize("value", ["[singel]", "[single, 7]", "single; rm -rf /"])
def test_unknown_categories_are_refused_when_the_spec_is_read(value: str) -> None:
    with pytest.raises(SpecError, match="grpo_categories"):
        with_settings(load_spec(SPEC), [f"cpu.grpo_categories={value}"])
