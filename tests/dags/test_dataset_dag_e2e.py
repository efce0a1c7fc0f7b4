"""The dataset DAG end to end with `dag.test()` (real Airflow on SQLite, real
great-expectations): a good run publishes a version and emits the Asset event; a dataset
outside the validation bounds stops at `validate` and nothing is published."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from training.pipeline.contracts import PublishedDataset


def run_dataset_dag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **config: Any) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    config_file = tmp_path / "pipeline.yaml"
    config_file.write_text(yaml.safe_dump({"data_root": str(tmp_path / "datasets"), **config}))
    monkeypatch.setenv("TOOLRL_PIPELINE_CONFIG", str(config_file))
    dag = DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags")).get_dag(
        "toolcall_dataset"
    )
    return dag.test(run_conf={"rows": 200})


def asset_events(run: Any) -> list[Any]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(
                AssetModel.name == "toolrl_validated_dataset",
                AssetEvent.source_run_id == run.run_id,
            )
        ).all()
        return [dict(r.extra or {}) for r in rows]


def task_states(run: Any) -> dict[str, str]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(
                TaskInstance.run_id == run.run_id, TaskInstance.dag_id == run.dag_id
            )
        )
        return {ti.task_id: str(ti.state) for ti in tis}


def test_good_run_publishes_and_emits_the_asset(
    airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_dataset_dag(tmp_path, monkeypatch)
    assert str(run.state) == "success"
    [extra] = asset_events(run)
    published = PublishedDataset.model_validate(extra)  # the event carries publish's contract
    version_dir = Path(published.dataset_dir)
    assert version_dir.name == published.dataset_version
    assert (version_dir / "manifest.json").is_file()
    assert Path(published.data_docs).is_file()
    assert not any((tmp_path / "datasets" / "staging").iterdir())


def test_bad_dataset_stops_at_validation(
    airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_dataset_dag(tmp_path, monkeypatch, validation={"max_prompt_tokens": 64})
    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["generate"] == "success"
    assert states["validate"] == "failed"
    assert states["publish"] == "upstream_failed"
    assert asset_events(run) == []
    published = [p for p in (tmp_path / "datasets").iterdir() if p.name != "staging"]
    assert published == []
    [staged] = list((tmp_path / "datasets" / "staging").iterdir())
    assert (staged / "validation" / "data_docs" / "index.html").is_file()
