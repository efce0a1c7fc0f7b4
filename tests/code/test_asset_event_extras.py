"""The Asset event boundary: what a retraining run accepts as "the dataset to train on".

An event's extras come from the dataset DAG, from any producer with API access, or from a
hand-made event in the UI, so they are input like any other: every malformed or hostile
shape gets a StageError that says what is wrong, before anything trains."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit.pipeline_specs import published_version
from training.pipeline.config import PipelineConfig
from training.pipeline.contracts import DatasetChoice
from training.pipeline.retraining_stage import (
    StageError,
    checked_version,
    dataset_from_events,
    resolve_dataset,
)


def _extra(path: Path, version: str | None = None) -> dict[str, Any]:
    return {"dataset_version": version or path.name, "dataset_dir": str(path)}


def test_a_published_version_is_accepted_with_its_files(tmp_path: Path) -> None:
    path = published_version(tmp_path, "v1")
    assert checked_version(path, "v1") == DatasetChoice(
        dataset_version="v1",
        dataset_dir=str(path),
        train=str(path / "train.parquet"),
        test=str(path / "test.parquet"),
    )


@pytest.mark.parametrize(
    ("break_it", "reason"),
    [
        (lambda p: (p / "train.parquet").unlink(), "has no train.parquet"),
        (lambda p: (p / "manifest.json").unlink(), "has no manifest.json"),
        (lambda p: (p / "validation" / "report.json").write_text("not json"), "no passing"),
        (lambda p: (p / "validation" / "report.json").write_text("[1, 2]"), "no passing"),
        (
            lambda p: (p / "validation" / "report.json").write_text('{"success": false}'),
            "no passing",
        ),
    ],
    ids=["no-train", "no-manifest", "report-not-json", "report-not-object", "report-failed"],
)
def test_a_broken_version_is_refused_with_the_reason(
    tmp_path: Path, break_it: Any, reason: str
) -> None:
    path = published_version(tmp_path, "v1")
    break_it(path)
    with pytest.raises(StageError, match=reason):
        checked_version(path)


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (None, "must hold a `dataset_dir` string"),
        ("a string", "must hold a `dataset_dir` string"),
        ({}, "must hold a `dataset_dir` string"),
        ({"dataset_dir": 7}, "must hold a `dataset_dir` string"),
        ({"dataset_dir": ["/a"]}, "must hold a `dataset_dir` string"),
        ({"dataset_dir": "/nonexistent/x"}, "does not exist"),
        ({"dataset_dir": "../../etc"}, "has no manifest.json|does not exist"),
    ],
    ids=["null", "string", "empty", "int-dir", "list-dir", "missing-dir", "traversal"],
)
def test_malformed_event_extras_are_refused(extra: Any, reason: str) -> None:
    with pytest.raises(StageError, match=reason):
        dataset_from_events([extra])


def test_an_event_naming_another_version_than_its_directory_is_refused(tmp_path: Path) -> None:
    path = published_version(tmp_path, "v1")
    with pytest.raises(StageError, match="names version 'v2' but points to"):
        dataset_from_events([_extra(path, "v2")])
    with pytest.raises(StageError, match="must be a string"):
        dataset_from_events([{"dataset_dir": str(path), "dataset_version": 3}])


def test_no_events_is_an_error_not_a_guess() -> None:
    with pytest.raises(StageError, match="carries no events"):
        dataset_from_events([])


def test_several_events_train_on_the_newest_and_name_the_others(tmp_path: Path) -> None:
    old, new = published_version(tmp_path, "v1"), published_version(tmp_path, "v2")
    published_version(tmp_path, "v3")  # newer on disk, but no event of this run announced it
    chosen = dataset_from_events([_extra(old), _extra(new)])
    assert chosen.dataset_version == "v2"
    assert chosen.superseded == ("v1",)


def test_only_the_newest_event_must_be_valid(tmp_path: Path) -> None:
    """An older, superseded event that is malformed does not block training on the newest."""
    new = published_version(tmp_path, "v2")
    chosen = dataset_from_events(["junk", {"dataset_dir": 1}, _extra(new)])
    assert chosen.dataset_version == "v2"


def test_a_hand_run_dataset_dir_wins_over_events_and_is_checked(tmp_path: Path) -> None:
    event_version, hand = published_version(tmp_path, "v1"), published_version(tmp_path, "hand")
    config = PipelineConfig(data_root=str(tmp_path))
    assert resolve_dataset(config, [_extra(event_version)], str(hand)).dataset_version == "hand"
    failed = published_version(tmp_path, "failed", passed=False)
    with pytest.raises(StageError, match="no passing validation report"):
        resolve_dataset(config, None, str(failed))
