"""
### toolcall_dataset

Regenerates the synthetic tool-call dataset from the tool catalog (ground truth computed by
executing the real tools), validates it with great-expectations and publishes the version.
A failed validation fails the run (the Data Docs path is in the log); nothing downstream
starts. On success it emits the `toolrl_validated_dataset` Asset event that schedules
`toolcall_retraining`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import Param, dag, task
from toolrl_plugins.assets import VALIDATED_DATASET
from toolrl_plugins.callbacks import on_task_failure

from training.pipeline.config import load_pipeline_config
from training.pipeline.contracts import GeneratedDataset, ValidatedDataset

DEFAULTS = load_pipeline_config()


@task
def generate(**context: Any) -> dict[str, Any]:
    from training.pipeline.dataset_stage import generate_stage

    rows = int(context["params"]["rows"])
    generated = generate_stage(load_pipeline_config(), context["dag_run"].run_id, rows)
    return generated.model_dump(mode="json")


@task(retries=0)
def validate(generated: dict[str, Any]) -> dict[str, Any]:
    from airflow.sdk.exceptions import AirflowFailException

    from training.pipeline.dataset_stage import DatasetRejectedError, validate_stage

    try:
        validated = validate_stage(
            load_pipeline_config(), GeneratedDataset.model_validate(generated)
        )
    except DatasetRejectedError as exc:
        raise AirflowFailException(str(exc)) from exc
    return validated.model_dump(mode="json")


@task(outlets=[VALIDATED_DATASET])
def publish(generated: dict[str, Any], validated: dict[str, Any], **context: Any) -> dict[str, Any]:
    from training.pipeline.dataset_stage import publish_stage

    published = publish_stage(
        load_pipeline_config(),
        GeneratedDataset.model_validate(generated),
        ValidatedDataset.model_validate(validated),
    )
    extra = published.model_dump(mode="json")  # the Asset event carries the same record
    context["outlet_events"][VALIDATED_DATASET].extra = extra
    return extra


@dag(
    schedule=DEFAULTS.dataset_schedule,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["toolrl", "data"],
    doc_md=__doc__,
    default_args={
        "owner": "ml-platform",
        "retries": DEFAULTS.retries,
        "retry_delay": timedelta(seconds=30),
        "execution_timeout": timedelta(minutes=DEFAULTS.task_timeout_minutes),
        "on_failure_callback": on_task_failure,
    },
    params={
        "rows": Param(
            DEFAULTS.dataset_rows,
            type="integer",
            minimum=10,
            description="Rows in the new dataset version.",
        )
    },
)
def toolcall_dataset() -> None:
    generated = generate()
    publish(generated, validate(generated))


toolcall_dataset()
