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

import logging
from typing import Any

from airflow.sdk import Asset

logger = logging.getLogger(__name__)

MAX_LEFT_BEHIND = 100
"""Bound on the events read back (a backlog larger than this is a stuck deployment)."""


def owned_event_extras(context: Any, asset: Asset) -> list[Any]:
    """The extras of this run's events, oldest first, with the ones Airflow left behind
    (logged as a warning when there are any)."""
    consumed = sorted(
        (context.get("triggering_asset_events") or {}).get(asset) or [],
        key=lambda e: e.timestamp,
    )
    if not consumed:
        return []
    newest = consumed[-1].timestamp
    started = context["dag_run"].start_date
    accessor = context["inlet_events"][asset]
    window = accessor.after(newest.isoformat()).before(started.isoformat()).limit(MAX_LEFT_BEHIND)
    left_behind = sorted((e for e in window if e.timestamp > newest), key=lambda e: e.timestamp)
    if left_behind:
        logger.warning(
            "claimed %d Asset event(s) Airflow left unconsumed (apache/airflow#56050)",
            len(left_behind),
        )
    return [e.extra for e in consumed + left_behind]
