"""The template-generalisation diagnostic's data side: the new rows it scores really are
unseen rows of the training templates, and its lexical reference classifies them."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

from testkit.benchmark_scripts import load_benchmark
from training.data.packs.generate import generate_builtin_dataset


@pytest.fixture(scope="module")
def diag() -> ModuleType:
    return load_benchmark("diag_template_generalization")


def test_new_rows_share_templates_but_no_query_with_train(diag: ModuleType, tmp_path: Path) -> None:
    generate_builtin_dataset(tmp_path, n=400, seed=0, progress=False)
    train = pd.read_parquet(tmp_path / "train.parquet")
    test = pd.read_parquet(tmp_path / "test.parquet")
    assert not set(train["template_id"]) & set(test["template_id"])  # the split is by template
    seen = diag.seen_template_rows(tmp_path, seed=1)
    assert len(seen) > 100
    assert {r["template_id"] for r in seen} <= set(train["template_id"])
    assert not {r["query"] for r in seen} & set(train["query"])

    bayes = diag.NaiveBayes().fit(
        train["query"].tolist(), [diag.first_step_label(r) for r in train.to_dict("records")]
    )
    in_template, held_out = bayes.accuracy(seen), bayes.accuracy(test.to_dict("records"))
    assert in_template > 0.85 and in_template - held_out > 0.15  # the cliff the doc reports
    assert bayes.accuracy([]) == 0.0  # no rows, no hits (and no division by zero)


@pytest.mark.parametrize("query", ["", "   ", "\x00\x01", "未知的问题", "a" * 10_000])
def test_naive_bayes_answers_any_query(diag: ModuleType, query: str) -> None:
    bayes = diag.NaiveBayes().fit(["weather in rome", "convert 3 kg"], ["w", "u"])
    assert bayes.predict(query) in {"w", "u"}
