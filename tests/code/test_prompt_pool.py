"""`cpu.grpo_fresh_rows`: GRPO draws its prompts from the train rows its SFT start did not
train on (`prompt_pool.py`, `sft.trained_rows`). What would break: the rows counted as
trained differ from the rows SFT trained on, a trained row reaches GRPO while fresh ones are
left, or a pool too small for GRPO's steps is not topped up."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from training.cpu_backend.prompt_pool import as_prompts, category_frame, prompt_pool
from training.cpu_backend.sft import sft_row_order, sft_rows, trained_rows, trajectory
from training.data.packs.generate import generate_builtin_dataset
from training.spec.model import CpuSection, SpecError, load_spec, with_settings

SPEC = Path(__file__).resolve().parents[2] / "training" / "specs" / "cpu_smollm2.yaml"
CATEGORIES = ["single", "clarification", "irrelevance"]


@pytest.fixture(scope="module")
def train_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("prompt-pool")
    generate_builtin_dataset(root, n=300, seed=3, progress=False)
    return root / "train.parquet"


def row_index(train_file: Path) -> list[int]:
    """Each row's `extra_info.index` (what a GRPO prompt row carries), by file position."""
    frame = pd.read_parquet(train_file, columns=["extra_info"])
    return [int(extra["index"]) for extra in frame["extra_info"]]


def test_trained_rows_are_the_rows_the_first_steps_train_on(train_file: Path) -> None:
    """The positions name exactly the trajectories SFT's first steps read, in the plan of the
    planned step count (a deadline stops it early; the plan is not a prefix of a longer one)."""
    spec = load_spec(SPEC)
    frame = pd.read_parquet(train_file)
    records = frame.to_dict("records")
    batch = spec.cpu.sft_batch_size
    trained = trained_rows(spec, train_file, planned_steps=20, trained_steps=7)
    planned = sft_rows(frame, 20, batch, spec.cpu.seed)
    assert len(trained) <= 7 * batch
    assert {str(trajectory(records[i])) for i in trained} == {str(t) for t in planned[: 7 * batch]}
    order = sft_row_order(frame, 20, batch, spec.cpu.seed)
    assert trained == frozenset(order[: 7 * batch])
    assert trained_rows(spec, train_file, 20, 0) == frozenset()


def test_no_trained_row_is_drawn_while_fresh_ones_last(train_file: Path) -> None:
    spec = load_spec(SPEC)
    trained = trained_rows(spec, train_file, planned_steps=20, trained_steps=20)
    positions = row_index(train_file)
    trained_index = {positions[i] for i in trained}
    pool = prompt_pool(train_file, CATEGORIES, trained, needed=16, seed=0)
    everything = prompt_pool(train_file, CATEGORIES).rows
    drawn = {row["extra_info"]["index"] for row in pool.rows}
    assert drawn and not drawn & trained_index
    fresh = {row["extra_info"]["index"] for row in everything} - trained_index
    assert drawn == fresh, "every fresh row of the categories, and only those"
    assert pool.as_dict() == {
        "drawn_from": len(fresh),
        "category_rows": len(everything),
        "fresh_rows": len(fresh),
        "topped_up": 0,
        "own_template_rows": 0,
    }
    assert len(fresh) < len(everything), "the fixture's SFT plan must cover some of them"


def test_too_few_fresh_rows_are_topped_up_with_a_seeded_sample(train_file: Path) -> None:
    """A long SFT leaves fewer fresh rows than GRPO's steps draw: the pool is filled to what
    they need with trained rows (the same ones for the same seed), fresh rows all kept."""
    everything = prompt_pool(train_file, CATEGORIES).rows
    frame = pd.read_parquet(train_file, columns=["category"])
    in_categories = [i for i, c in enumerate(frame["category"]) if c in CATEGORIES]
    trained = frozenset(in_categories[3:])  # three fresh rows left
    pool = prompt_pool(train_file, CATEGORIES, trained, needed=10, seed=4)
    assert (pool.fresh_rows, pool.topped_up, len(pool.rows)) == (3, 7, 10)
    assert pool.describe() == (
        f"GRPO draws its prompts from 10 train rows: 3 of the {len(everything)} in its "
        "categories that SFT did not train on, and 7 it did (too few left)"
    )
    positions = row_index(train_file)
    drawn = [row["extra_info"]["index"] for row in pool.rows]
    assert {positions[i] for i in in_categories[:3]} <= set(drawn)
    assert len(set(drawn)) == 10, "no row twice"
    again = prompt_pool(train_file, CATEGORIES, trained, needed=10, seed=4)
    assert [row["extra_info"]["index"] for row in again.rows] == drawn
    other = prompt_pool(train_file, CATEGORIES, trained, needed=10, seed=5)
    assert [row["extra_info"]["index"] for row in other.rows] != drawn
    whole = prompt_pool(train_file, CATEGORIES, frozenset(in_categories), needed=10**6)
    assert len(whole.rows) == len(everything), "more needed than exist: every row, once"


def test_nothing_trained_draws_every_row_of_the_categories(train_file: Path) -> None:
    pool = prompt_pool(train_file, CATEGORIES, frozenset(), needed=32)
    assert pool.rows == as_prompts(category_frame(train_file, CATEGORIES))
    assert (pool.fresh_rows, pool.topped_up) == (pool.category_rows, 0)
    assert len(prompt_pool(train_file).rows) == len(pd.read_parquet(train_file)), "every row"


def test_the_demo_spec_turns_it_on_and_non_booleans_are_refused() -> None:
    assert CpuSection().grpo_fresh_rows is False, "a spec that does not ask draws every row"
    assert load_spec(SPEC).cpu.grpo_fresh_rows is True
    assert not with_settings(load_spec(SPEC), ["cpu.grpo_fresh_rows=false"]).cpu.grpo_fresh_rows
    with pytest.raises(SpecError, match="grpo_fresh_rows"):
        with_settings(load_spec(SPEC), ["cpu.grpo_fresh_rows=sometimes"])
