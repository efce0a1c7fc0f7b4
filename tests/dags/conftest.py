"""Airflow for DAG tests: a throwaway AIRFLOW_HOME on SQLite, the repo's dags/ and plugins/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("AIRFLOW_HOME", str(REPO / ".airflow-test"))
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
for folder in ("dags", "plugins"):
    if str(REPO / folder) not in sys.path:
        sys.path.insert(0, str(REPO / folder))


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    home = Path(os.environ["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return home
