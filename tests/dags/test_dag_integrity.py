"""DAG folder integrity: imports cleanly without heavy modules, no cycles,
tags/owners/retries/timeouts, no connections, Variables or network touched at parse time."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
EXPECTED = {"toolcall_dataset", "toolcall_retraining"}


@pytest.fixture(scope="module")
def dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_no_import_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dags) >= EXPECTED


def test_dags_have_tags_owners_retries_and_timeouts(dagbag: Any) -> None:
    for dag_id, dag in dagbag.dags.items():
        assert dag.tags and "toolrl" in dag.tags, dag_id
        assert dag.doc_md, dag_id
        assert dag.catchup is False, dag_id
        for task in dag.tasks:
            assert task.owner == "ml-platform", (dag_id, task.task_id)
            assert task.execution_timeout is not None, (dag_id, task.task_id)
            assert task.on_failure_callback, (dag_id, task.task_id)
        assert any(task.retries > 0 for task in dag.tasks), dag_id


def test_no_cycles(dagbag: Any) -> None:
    for dag in dagbag.dags.values():
        dag.check_cycle()


def test_parsing_is_light() -> None:
    """Parse in a fresh interpreter; heavy libraries must not be imported at parse time (the
    parse time itself is a figure of benchmarks/bench_dag_parse.py, not a test)."""
    code = (
        "import sys\n"
        f"sys.path[:0] = [{str(REPO / 'dags')!r}, {str(REPO / 'plugins')!r}]\n"
        "import airflow.sdk\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(REPO / 'dags')!r})\n"
        "print(len(bag.dags), len(bag.import_errors))\n"
        "heavy = [m for m in ('torch', 'verl', 'great_expectations', 'mlflow', 'ray', 'trl',"
        " 'pandas') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split("\n")
    assert out[-3] == "2 0"  # both DAGs parsed, no import errors
    assert out[-2] == ""  # no heavy module imported


def test_parsing_touches_no_network_connections_or_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import BaseHook, Variable

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("touched at parse time")

    monkeypatch.setattr(socket.socket, "connect", forbidden)
    monkeypatch.setattr(BaseHook, "get_connection", forbidden)
    monkeypatch.setattr(Variable, "get", forbidden)
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert set(bag.dags) == {"toolcall_dataset", "toolcall_retraining"}


def test_the_folder_parses_as_the_dag_processor_parses_it(tmp_path: Path) -> None:
    """No sys.path help from this test suite: only Airflow's own configuration (DAGS_FOLDER,
    PLUGINS_FOLDER). Airflow puts the plugins folder on sys.path in every process; the DAG
    folder only in the dag-processor, so the DAGs import nothing from beside themselves."""
    import os

    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AIRFLOW") and key != "PYTHONPATH"
    }
    env |= {
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    code = (
        "from airflow.dag_processing.dagbag import DagBag\n"
        "bag = DagBag()\n"  # the configured DAGS_FOLDER, as the processor reads it
        "print(sorted(bag.dags), bag.import_errors)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == (
        "['toolcall_dataset', 'toolcall_retraining'] {}"
    )
