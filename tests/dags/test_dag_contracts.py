"""The DAGs hand typed contracts over (training/pipeline/contracts.py) and stay wiring: the
keys that templated operator fields pull out of an XCom are fields of that task's contract,
the task graph is the one the docs describe, and each DAG function is a short wiring block."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from training.pipeline.contracts import SubmittedJob, TrainingPlan

REPO = Path(__file__).resolve().parents[2]
PULL = re.compile(r"xcom_pull\(task_ids='(\w+)'\)\['(\w+)'\]")
#: The contract each task's XCom holds, for the tasks whose XCom templates read.
CONTRACTS: dict[str, type[BaseModel]] = {"plan_spec": TrainingPlan, "submit_training": SubmittedJob}


@pytest.fixture(scope="module")
def dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_templated_fields_pull_only_fields_of_the_producers_contract(dagbag: Any) -> None:
    pulled = []
    for dag in dagbag.dags.values():
        for task in dag.tasks:
            for field in getattr(task, "template_fields", ()):
                value = getattr(task, field, None)
                for producer, key in PULL.findall(value if isinstance(value, str) else ""):
                    pulled.append((task.task_id, producer, key))
                    assert key in CONTRACTS[producer].model_fields, (task.task_id, producer, key)
    assert {(p, k) for _, p, k in pulled} == {
        ("plan_spec", "spec_path"),
        ("plan_spec", "workdir"),
        ("plan_spec", "backend"),
        ("submit_training", "submission_id"),
    }


def test_the_retraining_graph_is_plan_train_evaluate_gate_register_promote(dagbag: Any) -> None:
    dag = dagbag.dags["toolcall_retraining"]
    upstream = {task.task_id: set(task.upstream_task_ids) for task in dag.tasks}
    assert upstream == {
        "plan_spec": set(),
        "proceed": {"plan_spec"},
        "check_tools": {"plan_spec", "proceed"},
        "submit_training": {"check_tools"},
        "wait_training": {"submit_training"},
        "fetch_result": {"submit_training", "wait_training"},
        "evaluate": {"plan_spec", "fetch_result"},
        "gate": {"plan_spec", "evaluate", "fetch_result"},
        "register": {"plan_spec", "fetch_result", "evaluate"},
        "promote": {"register", "gate"},
        "reload_serving": {"promote"},
        "notify": {"promote", "gate", "reload_serving"},
    }
    dataset = dagbag.dags["toolcall_dataset"]
    assert {t.task_id: set(t.upstream_task_ids) for t in dataset.tasks} == {
        "generate": set(),
        "validate": {"generate"},
        "publish": {"generate", "validate"},
    }


@pytest.mark.parametrize("name", ["toolcall_dataset", "toolcall_retraining"])
def test_the_dag_function_is_a_short_wiring_block(name: str) -> None:
    """Task bodies live in module-level task functions that call training/pipeline; the
    `@dag` function only creates the operators and wires them."""
    tree = ast.parse((REPO / "dags" / f"{name}.py").read_text(encoding="utf-8"))
    [function] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert function.end_lineno is not None
    assert function.end_lineno - function.lineno + 1 < 80
    nested = [n.name for n in ast.walk(function) if isinstance(n, ast.FunctionDef)]
    assert nested == [name], f"task bodies inside the DAG function: {nested[1:]}"
