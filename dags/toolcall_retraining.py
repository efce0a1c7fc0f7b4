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

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import Param, dag, task
from toolrl_plugins.assets import CHAMPION_MODEL, VALIDATED_DATASET
from toolrl_plugins.callbacks import on_task_failure
from toolrl_plugins.operators import SubmitRayTrainingOperator, WaitRayJobOperator

from training.pipeline.config import load_pipeline_config
from training.pipeline.contracts import (
    Evaluation,
    GateVerdict,
    Promotion,
    Registration,
    RunParams,
    SubmittedJob,
    TrainingPlan,
    TrainingResult,
)

DEFAULTS = load_pipeline_config()


@task(inlets=[VALIDATED_DATASET])
def plan_spec(**context: Any) -> dict[str, Any]:
    from airflow.sdk.exceptions import AirflowFailException
    from toolrl_plugins.asset_events import owned_event_extras
    from toolrl_plugins.connections import (
        gate_thresholds_variable,
        mlflow_uri,
        training_spec_variable,
    )

    from training.pipeline.retraining_stage import StageError, plan_run

    params = RunParams.model_validate(dict(context["params"]))
    if not params.spec:
        params = params.model_copy(update={"spec": training_spec_variable()})
    if not params.thresholds:
        params = params.model_copy(update={"thresholds": gate_thresholds_variable()})
    extras = owned_event_extras(context, VALIDATED_DATASET)
    run_key = context["dag_run"].run_id
    try:
        plan = plan_run(load_pipeline_config(), params, extras, run_key, mlflow_uri())
    except StageError as exc:  # a bad event or dataset will not get better on retry
        raise AirflowFailException(str(exc)) from exc
    return plan.model_dump(mode="json")


@task.short_circuit
def proceed(planned: dict[str, Any]) -> bool:
    return not TrainingPlan.model_validate(planned).dry_run


@task(retries=DEFAULTS.retries, retry_delay=timedelta(seconds=20))
def check_tools(planned: dict[str, Any]) -> str:
    from toolrl_plugins.connections import mcp_endpoint

    from training.pipeline.retraining_stage import check_planned_tools

    return check_planned_tools(mcp_endpoint()[0], TrainingPlan.model_validate(planned))


@task(retries=DEFAULTS.retries)
def fetch_result(submitted: dict[str, Any]) -> dict[str, Any]:
    from training.pipeline.retraining_stage import read_result

    job = SubmittedJob.model_validate(submitted)
    return read_result(job.result_dir).model_dump(mode="json")


@task
def evaluate(planned: dict[str, Any], result: dict[str, Any], **context: Any) -> dict[str, Any]:
    from toolrl_plugins.connections import mcp_endpoint, mlflow_uri
    from toolrl_plugins.hooks import RayJobsHook

    from training.pipeline.evaluation_job import evaluate_on_ray
    from training.pipeline.gate_stage import evaluate_candidate_and_champion

    plan, trained = TrainingPlan.model_validate(planned), TrainingResult.model_validate(result)
    if load_pipeline_config().evaluation_runs_on == "ray":  # the cluster: no torch here
        client, attempt = RayJobsHook().get_client(), int(context["ti"].try_number)
        # the token stays out of the job's request: Ray nodes hold TOOLRL_MCP_TOKEN themselves
        evaluation = evaluate_on_ray(
            client, plan, trained, mcp_endpoint()[0], mlflow_uri(), attempt
        )
    else:
        url, token = mcp_endpoint()
        evaluation = evaluate_candidate_and_champion(plan, trained, url, mlflow_uri(), token)
    return evaluation.model_dump(mode="json")


@task
def gate(
    planned: dict[str, Any], evaluated: dict[str, Any], result: dict[str, Any]
) -> dict[str, Any]:
    from training.pipeline.gate_stage import gate_candidate

    verdict = gate_candidate(
        Evaluation.model_validate(evaluated),
        TrainingResult.model_validate(result),
        TrainingPlan.model_validate(planned).thresholds,
    )
    return verdict.model_dump(mode="json")


@task(retries=DEFAULTS.retries)
def register(
    planned: dict[str, Any], result: dict[str, Any], evaluated: dict[str, Any], **context: Any
) -> dict[str, Any]:
    from toolrl_plugins.connections import mlflow_uri

    from training.pipeline.gate_stage import register_candidate_version

    registration = register_candidate_version(
        mlflow_uri(),
        TrainingPlan.model_validate(planned),
        TrainingResult.model_validate(result),
        Evaluation.model_validate(evaluated),
        context["dag_run"].run_id,
    )
    return registration.model_dump(mode="json")


@task(retries=DEFAULTS.retries, outlets=[CHAMPION_MODEL])
def promote(registered: dict[str, Any], decision: dict[str, Any], **context: Any) -> dict[str, Any]:
    from toolrl_plugins.connections import mlflow_uri

    from training.pipeline.gate_stage import apply_decision

    promotion = apply_decision(
        mlflow_uri(), Registration.model_validate(registered), GateVerdict.model_validate(decision)
    )
    if promotion.promoted:
        context["outlet_events"][CHAMPION_MODEL].extra = promotion.champion_event_extra()
    return promotion.model_dump(mode="json")


@task(retries=DEFAULTS.retries)
def reload_serving(applied: dict[str, Any]) -> str:
    from training.pipeline.gate_stage import confirm_serving

    return confirm_serving(Promotion.model_validate(applied))


@task
def notify(applied: dict[str, Any], decision: dict[str, Any], served: str) -> dict[str, Any]:
    from training.pipeline.gate_stage import summary

    outcome = summary(
        Promotion.model_validate(applied), GateVerdict.model_validate(decision), served
    )
    return outcome.model_dump(mode="json")


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

    planned = plan_spec()
    proceed(planned) >> check_tools(planned) >> submit >> wait
    result = fetch_result(submit.output)
    wait >> result
    evaluated = evaluate(planned, result)
    decision = gate(planned, evaluated, result)
    applied = promote(register(planned, result, evaluated), decision)
    notify(applied, decision, reload_serving(applied))


toolcall_retraining()
