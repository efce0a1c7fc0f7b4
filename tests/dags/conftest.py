"""Airflow for DAG tests: a throwaway AIRFLOW_HOME on SQLite, the repo's dags/ and plugins/."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.airflow_env import configure, migrate

configure()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    return migrate()
