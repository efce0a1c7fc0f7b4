"""`toolrl airflow up`'s environment and files, without starting anything: the four services
must agree on every shared setting, and the login must be private and generated once."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from serving.settings import CONNECTIONS
from training.ops.airflow.layout import (
    AirflowLayout,
    AirflowPorts,
    connection_uris,
    ensure_login,
    read_login,
    service_env,
    use_wal,
)
from training.ops.airflow.services import AirflowServiceError, Deployment
from training.pipeline.config import PipelineConfig


def test_every_service_gets_the_same_execution_api_db_ports_and_connections(
    tmp_path: Path,
) -> None:
    layout = AirflowLayout(tmp_path)
    config = PipelineConfig(connections={"toolrl_ray": "http://ray:8265"})
    env = service_env(layout, AirflowPorts(18080, 18793, 18794), config, tmp_path / "p.yaml")
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18080/execution/"
    assert env["AIRFLOW__CORE__SQL_ALCHEMY_CONN"] == f"sqlite:///{tmp_path}/airflow/airflow.db"
    assert env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] == "18793"
    assert env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] == "18794"
    assert env["AIRFLOW__CORE__PARALLELISM"] == "4"
    assert env["AIRFLOW_CONN_TOOLRL_RAY"] == "http://ray:8265"
    mlflow = next(c for c in CONNECTIONS if c.conn_id == "toolrl_mlflow")
    assert env["AIRFLOW_CONN_TOOLRL_MLFLOW"] == mlflow.default_uri
    assert env["TOOLRL_PIPELINE_CONFIG"] == str((tmp_path / "p.yaml").resolve())


def test_an_unknown_connection_id_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown connection id\(s\) \['toolrl_rayy'\]"):
        connection_uris(PipelineConfig(connections={"toolrl_rayy": "http://x"}))


@pytest.mark.parametrize(
    "airflow",
    [{"api_port": 0}, {"api_port": 70000}, {"parallelism": 0}, {"dag_refresh_s": 1}, {"x": 1}],
)
def test_bad_airflow_settings_are_refused_by_the_config(airflow: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        PipelineConfig.model_validate({"airflow": airflow})


def test_the_login_is_generated_once_and_private(tmp_path: Path) -> None:
    layout = AirflowLayout(tmp_path)
    layout.home.mkdir(parents=True)
    password = ensure_login(layout)
    assert password and len(password) >= 20
    assert stat.S_IMODE(layout.passwords.stat().st_mode) == 0o600
    assert ensure_login(layout) is None  # printed once, never regenerated
    assert read_login(layout) == ("admin", password)


def test_a_missing_or_corrupt_login_says_how_to_get_one(tmp_path: Path) -> None:
    layout = AirflowLayout(tmp_path)
    with pytest.raises(FileNotFoundError, match="toolrl airflow up"):
        read_login(layout)
    layout.home.mkdir(parents=True)
    layout.passwords.write_text("{not json")
    with pytest.raises(FileNotFoundError, match="toolrl airflow up"):
        read_login(layout)


def test_wal_mode_sticks_to_the_database_file(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "airflow.db"
    sqlite3.connect(db).close()
    assert use_wal(db) == "wal"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_corrupt_service_registry_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    layout = AirflowLayout(tmp_path)
    layout.home.mkdir(parents=True)
    assert Deployment.load(layout) is None
    layout.registry.write_text(json.dumps({"api_url": "http://x"}))
    with pytest.raises(AirflowServiceError, match="unreadable"):
        Deployment.load(layout)
