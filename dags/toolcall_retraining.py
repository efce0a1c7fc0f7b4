"""
### toolcall_retraining

Scheduled on the `toolrl_validated_dataset` Asset (and triggerable by hand): plan and
validate the TrainingSpec, check the MCP tool server, submit GRPO training to Ray
(idempotent per run), wait for it in the triggerer (no worker slot held), read the result,
evaluate the candidate (and the current champion on the same data), gate, register the
candidate as `challenger`, promote it to `champion` if the gate says so, and confirm
serving picked it up. A rejected candidate stays registered as rejected with its reasons;
that is a successful run of the gate, not a pipeline failure.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import Param, dag, task
from toolrl_plugins.assets import CHAMPION_MODEL, VALIDATED_DATASET
from toolrl_plugins.callbacks import on_task_failure
from toolrl_plugins.operators import SubmitRayTrainingOperator, WaitRayJobOperator

from training.pipeline.config import load_pipeline_config

DEFAULTS = load_pipeline_config()


@dag(
    schedule=[VALIDATED_DATASET],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["toolrl", "training"],
    doc_md=__doc__,
    default_args={
        "owner": "ml-platform",
        "retries": 0,
        "execution_timeout": timedelta(minutes=DEFAULTS.task_timeout_minutes),
        "on_failure_callback": on_task_failure,
    },
    params={
        "spec": Param("", type="string", description="TrainingSpec YAML (empty: config's)."),
        "thresholds": Param("", type="string", description="Gate thresholds (empty: config's)."),
        "backend": Param("", enum=["", "cpu", "verl"], description="Empty: config's backend."),
        "dataset_dir": Param("", type="string", description="Dataset version dir (hand runs)."),
        "dry_run": Param(False, type="boolean", description="Plan and validate only."),
        "eval_limit": Param(0, type="integer", minimum=0, description="Cap eval cases (0: all)."),
    },
)
def toolcall_retraining() -> None:
    @task(inlets=[VALIDATED_DATASET])
    def plan_spec(**context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException
        from toolrl_plugins.asset_events import owned_event_extras
        from toolrl_plugins.connections import mlflow_uri

        from training.pipeline.config import load_pipeline_config
        from training.pipeline.gate_stage import model_name
        from training.pipeline.retraining_stage import StageError, prepare_spec, resolve_dataset

        params = context["params"]
        extras, left_behind = owned_event_extras(context, VALIDATED_DATASET)
        if left_behind:
            logging.getLogger(__name__).warning(
                "claimed %d Asset event(s) Airflow left unconsumed (apache/airflow#56050)",
                left_behind,
            )
        config = load_pipeline_config()
        try:
            dataset = resolve_dataset(config, extras, params["dataset_dir"] or None)
        except StageError as exc:  # a bad event or dataset will not get better on retry
            raise AirflowFailException(str(exc)) from exc
        if dataset.get("superseded"):
            logging.getLogger(__name__).info(
                "trains on %s; superseded: %s", dataset["dataset_version"], dataset["superseded"]
            )
        backend = params["backend"] or config.training_backend
        planned = prepare_spec(
            config,
            params["spec"] or config.training_spec,
            dataset,
            context["dag_run"].run_id,
            validate_with_verl=backend == "verl",
            tracking_uri=mlflow_uri(),
            model_name=model_name(),
        )
        return {
            **planned,
            "dataset_superseded": dataset.get("superseded", ""),
            "backend": backend,
            "thresholds": params["thresholds"] or config.thresholds,
        }

    @task.short_circuit
    def proceed(**context: Any) -> bool:
        return not context["params"]["dry_run"]

    @task(retries=DEFAULTS.retries, retry_delay=timedelta(seconds=20))
    def check_tools(planned: dict[str, Any]) -> str:
        from toolrl_plugins.connections import mcp_endpoint

        from training.pipeline.retraining_stage import check_planned_tools

        return check_planned_tools(mcp_endpoint()[0], planned)

    submit = SubmitRayTrainingOperator(
        task_id="submit_training",
        spec_path="{{ ti.xcom_pull(task_ids='plan_spec')['spec_path'] }}",
        workdir="{{ ti.xcom_pull(task_ids='plan_spec')['workdir'] }}/jobs",
        backend="{{ ti.xcom_pull(task_ids='plan_spec')['backend'] }}",
        retries=DEFAULTS.retries + 1,
        retry_delay=timedelta(seconds=15),
        retry_exponential_backoff=True,
    )
    wait = WaitRayJobOperator(
        task_id="wait_training",
        submission_id="{{ ti.xcom_pull(task_ids='submit_training')['submission_id'] }}",
        poll_interval_s=5.0,
        execution_timeout=timedelta(hours=DEFAULTS.training_timeout_hours),
    )

    @task(retries=DEFAULTS.retries)
    def fetch_result(submitted: dict[str, str]) -> dict[str, Any]:
        from training.pipeline.retraining_stage import read_result

        return read_result(submitted["result_dir"])

    @task
    def evaluate(planned: dict[str, Any], result: dict[str, Any], **context: Any) -> dict[str, Any]:
        from toolrl_plugins.connections import mcp_endpoint, mlflow_uri

        from training.pipeline.config import load_pipeline_config
        from training.pipeline.gate_stage import evaluate_candidate_and_champion

        config = load_pipeline_config()
        return evaluate_candidate_and_champion(
            planned,
            result,
            mcp_endpoint()[0],
            mlflow_uri(),
            context["params"]["eval_limit"] or config.eval_limit,
            config.eval_backend,
        )

    @task
    def gate(
        planned: dict[str, Any], evaluated: dict[str, Any], result: dict[str, Any]
    ) -> dict[str, Any]:
        from training.pipeline.gate_stage import gate_candidate

        return gate_candidate(evaluated, result, planned["thresholds"])

    @task(retries=DEFAULTS.retries)
    def register(
        planned: dict[str, Any], result: dict[str, Any], evaluated: dict[str, Any], **context: Any
    ) -> dict[str, Any]:
        from toolrl_plugins.connections import mlflow_uri

        from training.pipeline.gate_stage import register_candidate_version

        return register_candidate_version(
            mlflow_uri(), planned, result, evaluated, context["dag_run"].run_id
        )

    @task(retries=DEFAULTS.retries, outlets=[CHAMPION_MODEL])
    def promote(
        registered: dict[str, Any], decision: dict[str, Any], **context: Any
    ) -> dict[str, Any]:
        from toolrl_plugins.connections import mlflow_uri

        from training.pipeline.gate_stage import apply_decision

        applied = apply_decision(mlflow_uri(), registered, decision)
        if applied["promoted"]:
            context["outlet_events"][CHAMPION_MODEL].extra = {
                "model_name": applied["name"],
                "version": applied["version"],
            }
        return applied

    @task(retries=DEFAULTS.retries)
    def reload_serving(applied: dict[str, Any]) -> str:
        from training.pipeline.gate_stage import confirm_serving

        return confirm_serving(applied)

    @task
    def notify(applied: dict[str, Any], decision: dict[str, Any], served: str) -> str:
        from training.pipeline.gate_stage import summary

        return summary(applied, decision, served)

    planned = plan_spec()
    go = proceed()
    tools = check_tools(planned)
    planned >> go >> tools >> submit >> wait
    result = fetch_result(submit.output)
    wait >> result
    evaluated = evaluate(planned, result)
    decision = gate(planned, evaluated, result)
    registered = register(planned, result, evaluated)
    applied = promote(registered, decision)
    notify(applied, decision, reload_serving(applied))


toolcall_retraining()
