"""RayJobTrigger: polls the Ray Jobs API from the triggerer (asyncio), so a training job that
runs for hours holds no worker slot. Fires once, when the job reaches a terminal state.

It is serialized with the connection id, not the address and token: trigger kwargs are
stored in the metadata DB and shown in the triggerer's log (`repr`), so the token is read
from the connection each time the trigger starts (also after a triggerer restart)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class RayJobTrigger(BaseTrigger):
    def __init__(
        self,
        ray_conn_id: str,
        submission_id: str,
        poll_interval_s: float = 10.0,
        max_unreachable_polls: int = 30,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ray_conn_id = ray_conn_id
        self.submission_id = submission_id
        self.poll_interval_s = poll_interval_s
        self.max_unreachable_polls = max_unreachable_polls

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "toolrl_plugins.triggers.RayJobTrigger",
            {
                "ray_conn_id": self.ray_conn_id,
                "submission_id": self.submission_id,
                "poll_interval_s": self.poll_interval_s,
                "max_unreachable_polls": self.max_unreachable_polls,
            },
        )

    @staticmethod
    def _poll(address: str, token: str | None, submission_id: str) -> str | None:
        from training.jobs.submit import connect, get_status

        return get_status(connect(address, token), submission_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow.sdk import BaseHook

        from toolrl_plugins.hooks import address_from_connection
        from training.jobs.submit import RayAuthError

        conn = await BaseHook.aget_connection(self.ray_conn_id)
        address, token = address_from_connection(conn), (conn.password or None)
        unreachable = 0
        while True:
            try:
                status = await asyncio.to_thread(self._poll, address, token, self.submission_id)
                unreachable = 0
            except RayAuthError as exc:  # the same token will be refused again: stop now
                yield TriggerEvent(
                    {
                        "submission_id": self.submission_id,
                        "status": "UNAUTHORIZED",
                        "message": str(exc),
                    }
                )
                return
            except Exception as exc:  # the head restarting: keep polling, bounded
                unreachable += 1
                self.log.warning(
                    "Ray Jobs API unreachable (%d/%d): %s",
                    unreachable,
                    self.max_unreachable_polls,
                    exc,
                )
                if unreachable >= self.max_unreachable_polls:
                    yield TriggerEvent(
                        {
                            "submission_id": self.submission_id,
                            "status": "UNREACHABLE",
                            "message": str(exc)[:500],
                        }
                    )
                    return
                await asyncio.sleep(self.poll_interval_s)
                continue
            if status is None:
                yield TriggerEvent(
                    {
                        "submission_id": self.submission_id,
                        "status": "MISSING",
                        "message": "the Ray cluster has no job with this id",
                    }
                )
                return
            if status in TERMINAL:
                yield TriggerEvent(
                    {"submission_id": self.submission_id, "status": status, "message": ""}
                )
                return
            await asyncio.sleep(self.poll_interval_s)
