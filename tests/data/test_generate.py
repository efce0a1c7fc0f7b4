"""The built-in dataset (the `toolrl` pack, what `toolrl data generate` and the dataset DAG
write): verl's row schema, executed ground truth, determinism, coverage, splits."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from serving.tools import ToolContext, get_catalog
from training.data.config import GenerationConfig
from training.data.packs.generate import generate_builtin_dataset, load_builtin_pack
from training.data.packs.model import step_calls
from training.data.packs.plan import pack_config, plan_rows, with_chinese_fraction
from training.data.queries import query_shape
from training.data.schema import Category, GroundTruth


def load(small_dataset: tuple[Path, dict[str, Any]]) -> pd.DataFrame:
    out, _ = small_dataset
    return pd.concat(
        [pd.read_parquet(out / "train.parquet"), pd.read_parquet(out / "test.parquet")]
    )


def test_rows_follow_verl_agent_loop_schema(small_dataset: tuple[Path, dict[str, Any]]) -> None:
    frame = load(small_dataset)
    row = frame.iloc[0]
    assert row["agent_name"] == "tool_agent"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["reward_model"]["style"] == "rule"
    GroundTruth.from_json(row["reward_model"]["ground_truth"])
    extra = row["extra_info"]
    assert extra["split"] in ("train", "test") and extra["need_tools_kwargs"]
    assert set(extra["tools_kwargs"]) == set(get_catalog().names)


def test_manifest_counts_match_files(small_dataset: tuple[Path, dict[str, Any]]) -> None:
    out, manifest = small_dataset
    frame = load(small_dataset)
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == manifest
    assert manifest["rows"] == len(frame) == 600
    assert sum(manifest["category"].values()) == 600
    assert manifest["splits"]["test"] == len(pd.read_parquet(out / "test.parquet"))
    assert set(manifest["tools"]) == set(get_catalog().names)
    assert all(count > 0 for count in manifest["tools"].values())


def test_ground_truth_is_what_the_real_tools_return(
    small_dataset: tuple[Path, dict[str, Any]],
) -> None:
    frame = load(small_dataset)
    catalog = get_catalog()
    for _, row in frame.sample(60, random_state=0).iterrows():
        truth = GroundTruth.from_json(row["reward_model"]["ground_truth"])
        context = ToolContext.reference(session_id="check")
        results = [
            [catalog.execute(c.name, c.arguments, context, mode="real") for c in step]
            for step in truth.steps
        ]
        assert results == truth.results
        blob = json.dumps(results, ensure_ascii=False)
        assert all(answer in blob for answer in truth.answers)


def test_multi_step_rows_chain_results(small_dataset: tuple[Path, dict[str, Any]]) -> None:
    frame = load(small_dataset)
    multi = frame[frame["category"] == "multi_step"]
    assert len(multi) > 50
    assert (multi["num_steps"] >= 2).all()
    chained = 0
    for _, row in multi.iterrows():
        truth = GroundTruth.from_json(row["reward_model"]["ground_truth"])
        first = json.dumps(truth.results[0], ensure_ascii=False)
        later_args = [
            str(v) for step in truth.steps[1:] for c in step for v in c.arguments.values()
        ]
        chained += any(value in first for value in later_args if len(value) > 1)
    assert chained / len(multi) > 0.6  # most chains feed an earlier result into a later call


def test_every_category_and_both_languages_present(
    small_dataset: tuple[Path, dict[str, Any]],
) -> None:
    frame = load(small_dataset)
    assert set(frame["category"]) == {c.value for c in Category}
    assert set(frame["language"]) == {"en", "zh"}
    irrelevant = frame[frame["category"] == "irrelevance"]
    assert (irrelevant["num_steps"] == 0).all()
    clarify = frame[frame["category"] == "clarification"]
    truths = [GroundTruth.from_json(g["ground_truth"]) for g in clarify["reward_model"]]
    assert all(t.missing_argument and not t.steps for t in truths)


def test_no_near_duplicates_between_train_and_test(
    small_dataset: tuple[Path, dict[str, Any]],
) -> None:
    out, _ = small_dataset
    train = pd.read_parquet(out / "train.parquet")
    test = pd.read_parquet(out / "test.parquet")
    assert not set(train["template_id"]) & set(test["template_id"])
    assert not set(train["query"].map(query_shape)) & set(test["query"].map(query_shape))
    assert frame_unique(pd.concat([train, test])["query"])


def frame_unique(series: pd.Series) -> bool:
    return bool(series.is_unique)


def test_same_seed_same_version_other_seed_other_version(tmp_path: Path) -> None:
    made = [
        generate_builtin_dataset(tmp_path / str(i), n=200, seed=seed, progress=False)
        for i, seed in enumerate((3, 3, 4))
    ]
    versions = [m.manifest["dataset_version"] for m in made]
    assert versions[0] == versions[1] != versions[2]


@pytest.mark.parametrize("chinese_fraction", [None, 0.0])  # the pack's 0.3; the pipeline's 0
def test_small_datasets_pass_coverage_whatever_the_seed(
    chinese_fraction: float | None, tmp_path: Path
) -> None:
    """A scheduled run picks its seed from the run id; no seed may leave a tool out of 120 rows
    or miss the category mix by the validation's tolerance.

    With independent draws about one seed in twenty missed a category share by more than
    0.08 and some left a tool out (CI failed on such run ids twice); the plan deals exact
    category counts and intents from a deck. Every row's category and tools are fixed by the
    plan, so 60 seeds are checked there, and three are generated in full: a row left out as
    invalid could take a tool with it, so none may be.
    """
    loaded = with_chinese_fraction(load_builtin_pack(), chinese_fraction)
    names = set(get_catalog().names)
    for seed in range(60):
        config = pack_config(loaded.spec, 120, seed, 0.1)
        plan = plan_rows(loaded.spec, config)
        used = {c.tool for row in plan for step in row.intent.steps for c in step_calls(step)}
        assert used == names, f"seed {seed} leaves out {sorted(names - used)}"
        shares = Counter(row.intent.category for row in plan)
        for category, target in config.category_mix.items():
            assert abs(shares[category] / 120 - target) <= 1 / 120 + 1e-9
    for seed in (7, 13, 52):
        made = generate_builtin_dataset(
            tmp_path / str(seed),
            n=120,
            seed=seed,
            chinese_fraction=chinese_fraction,
            progress=False,
        )
        assert made.manifest["pack"]["invalid_rows"] == 0
        assert {tool for row in made.rows for tool in row["tools_used"]} == names


@pytest.mark.parametrize(
    "settings",
    [
        {"n": 5},
        {"test_fraction": 0.9},
        {"category_mix": {"single": 0.5}},
        {"bogus": 1},
        {"category_mix": {"single": 1.5, "parallel": -0.5}},
    ],
)
def test_bad_generation_settings_are_rejected(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="validation error"):
        GenerationConfig.model_validate(settings)
