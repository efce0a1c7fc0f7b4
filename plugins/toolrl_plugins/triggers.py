"""RayJobTrigger: polls the Ray Jobs API from the triggerer (asyncio), so a training job that
runs for hours holds no worker slot. Fires once, when the job reaches a terminal state."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class RayJobTrigger(BaseTrigger):
    def __init__(
        self,
        address: str,
        submission_id: str,
        poll_interval_s: float = 10.0,
        max_unreachable_polls: int = 30,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.address = address
        self.submission_id = submission_id
        self.poll_interval_s = poll_interval_s
        self.max_unreachable_polls = max_unreachable_polls

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "toolrl_plugins.triggers.RayJobTrigger",
            {
                "address": self.address,
                "submission_id": self.submission_id,
                "poll_interval_s": self.poll_interval_s,
                "max_unreachable_polls": self.max_unreachable_polls,
            },
        )

    def _poll(self) -> str | None:
        from training.jobs.submit import connect, get_status

        return get_status(connect(self.address), self.submission_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        unreachable = 0
        while True:
            try:
                status = await asyncio.to_thread(self._poll)
                unreachable = 0
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
