"""The Asset events a retraining run owns, including the ones Airflow 3.3.2 leaves behind.

Airflow 3.3.2 folds every event that arrives while a DAG is at `max_active_runs` into one
queue row that keeps the *first* event's time; the next run then consumes only the events up
to that time and the queue row is deleted, so later events trigger nothing until some new
event arrives (apache/airflow#56050, fixed upstream by batch-consuming them, #71998). A
training pipeline must not sit on a validated dataset for a week, so the run also claims the
events that landed between its newest consumed event and its own start: the batch semantics
of the upstream fix.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset

MAX_LEFT_BEHIND = 100
"""Bound on the events read back (a backlog larger than this is a stuck deployment)."""


def owned_event_extras(context: Any, asset: Asset) -> tuple[list[Any], int]:
    """(extras oldest first, how many of them Airflow left behind) for this run."""
    consumed = sorted(
        (context.get("triggering_asset_events") or {}).get(asset) or [],
        key=lambda e: e.timestamp,
    )
    if not consumed:
        return [], 0
    newest = consumed[-1].timestamp
    started = context["dag_run"].start_date
    accessor = context["inlet_events"][asset]
    window = accessor.after(newest.isoformat()).before(started.isoformat()).limit(MAX_LEFT_BEHIND)
    left_behind = sorted((e for e in window if e.timestamp > newest), key=lambda e: e.timestamp)
    return [e.extra for e in consumed + left_behind], len(left_behind)
