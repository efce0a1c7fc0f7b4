"""A small client of Airflow's REST API (v2): what the demo and the tests need, no more.

Why not `apache-airflow-client`: it is another package pinned to one Airflow release, and the
dozen calls here are plain JSON. Errors say which call failed and what the server answered;
when the api-server does not answer at all, `AirflowUnavailableError` says so (the caller knows
which log to point to).
"""

from __future__ import annotations

import time
from typing import Any

import httpx


class AirflowApiError(RuntimeError):
    """The api-server answered, but not with what the call needs."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AirflowUnavailableError(AirflowApiError):
    """The api-server did not answer (down, or not started yet)."""


class AirflowApi:
    def __init__(self, base_url: str, username: str, password: str, timeout_s: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self._login = {"username": username, "password": password}
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s)
        self._token: str | None = None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AirflowApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def token(self) -> str:
        """A JWT for the API and the UI (the UI reads it from the `_token` cookie)."""
        if self._token is None:
            try:
                response = self._send("POST", "/auth/token", json=self._login, auth=False)
            except AirflowUnavailableError:
                raise
            except AirflowApiError as exc:
                raise AirflowApiError(
                    f"the Airflow login was refused for user {self._login['username']!r} at "
                    f"{self.base_url} ({exc}); the generated login is in "
                    "WORKDIR/airflow/ui_login.json"
                ) from exc
            self._token = str(response.json()["access_token"])
        return self._token

    def _send(
        self,
        method: str,
        path: str,
        *,
        auth: bool = True,
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        for attempt in (1, 2):
            sent = dict(headers or {})
            if auth:
                sent["Authorization"] = f"Bearer {self.token}"
            try:
                response = self._http.request(method, path, headers=sent, **kwargs)
            except httpx.TransportError as exc:
                raise AirflowUnavailableError(
                    f"Airflow api-server at {self.base_url} did not answer {method} {path}: {exc}"
                ) from exc
            if response.status_code == 401 and auth and attempt == 1:
                self._token = None  # expired: log in again once
                continue
            if response.status_code >= 400:
                raise AirflowApiError(
                    f"{method} {path} -> {response.status_code}: {response.text[:500]}",
                    response.status_code,
                )
            return response
        raise AirflowApiError(f"{method} {path}: the login is refused (401)")

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        body: dict[str, Any] = self._send("GET", path, params=params or None).json()
        return body

    # DAGs ------------------------------------------------------------------------------------
    def dag(self, dag_id: str) -> dict[str, Any] | None:
        try:
            return self.get(f"/api/v2/dags/{dag_id}")
        except AirflowUnavailableError:
            raise
        except AirflowApiError as exc:
            if exc.status == 404:
                return None
            raise

    def import_errors(self) -> list[dict[str, Any]]:
        return list(self.get("/api/v2/importErrors").get("import_errors", []))

    def wait_parsed(self, dag_ids: list[str], timeout_s: float = 120.0) -> None:
        """Until the dag-processor has serialized every DAG; fails with its import errors."""
        deadline = time.monotonic() + timeout_s
        while True:
            missing = [d for d in dag_ids if self.dag(d) is None]
            if not missing:
                return
            errors = self.import_errors()
            if errors:
                first = errors[0]
                raise AirflowApiError(
                    f"the DAG folder has import errors: {first.get('filename')}: "
                    f"{str(first.get('stack_trace', ''))[-800:]}"
                )
            if time.monotonic() > deadline:
                raise AirflowApiError(
                    f"DAGs {missing} not parsed after {timeout_s:.0f}s: is the dag-processor up?"
                )
            time.sleep(1.0)

    def set_paused(self, dag_id: str, paused: bool) -> None:
        self._send("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": paused})

    # runs ------------------------------------------------------------------------------------
    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        response = self._send(
            "POST",
            f"/api/v2/dags/{dag_id}/dagRuns",
            json={"logical_date": None, "conf": conf or {}},
        )
        return str(response.json()["dag_run_id"])

    def clear_task(self, dag_id: str, run_id: str, task_id: str) -> None:
        """Clear `task_id` and its downstream tasks in one run, which sets the run running
        again: Airflow's own way to re-run part of a run (the UI's "Clear" with downstream)."""
        self._send(
            "POST",
            f"/api/v2/dags/{dag_id}/clearTaskInstances",
            json={
                "dry_run": False,
                "dag_run_id": run_id,
                "task_ids": [task_id],
                "include_downstream": True,
                "only_failed": False,
                "reset_dag_runs": True,
            },
        )

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """All runs of a DAG, oldest first."""
        body = self.get(f"/api/v2/dags/{dag_id}/dagRuns", order_by="run_after", limit=100)
        return list(body.get("dag_runs", []))

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        body = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances", limit=100)
        return {ti["task_id"]: ti.get("state") for ti in body.get("task_instances", [])}

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        body = self.get(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
            deserialize=True,
        )
        return body.get("value")

    def upstream_asset_events(
        self, dag_id: str, run_id: str, timeout_s: float = 300.0
    ) -> list[dict[str, Any]]:
        """The Asset events this run consumed (what an Asset-triggered run was started by).

        Airflow 3.3.2 answers 500 here while any run the events created is still queued (its
        response model requires a `start_date`), so this waits until the run has started."""
        deadline = time.monotonic() + timeout_s
        while self.dag_run(dag_id, run_id).get("start_date") is None:
            if time.monotonic() > deadline:
                raise AirflowApiError(f"{dag_id} {run_id} did not start within {timeout_s:.0f}s")
            time.sleep(1.0)
        body = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/upstreamAssetEvents")
        return list(body.get("asset_events", []))

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """The task's log as text, one line per structured log record."""
        body = self.get(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        )
        content = body.get("content")
        records = content if isinstance(content, list) else [content]
        lines = []
        for record in records:
            if isinstance(record, dict):
                extra = {k: v for k, v in record.items() if k not in ("event", "timestamp")}
                lines.append(f"{record.get('event', '')} {extra if extra else ''}".rstrip())
            elif record is not None:
                lines.append(str(record))
        return "\n".join(lines)

    # assets ----------------------------------------------------------------------------------
    def asset_id(self, uri: str) -> int:
        for asset in self.get("/api/v2/assets", uri_pattern=uri, limit=100).get("assets", []):
            if asset.get("uri") == uri:
                return int(asset["id"])
        raise AirflowApiError(f"no asset with uri {uri}: has the producing DAG been parsed?")

    def create_asset_event(self, uri: str, extra: dict[str, Any]) -> dict[str, Any]:
        """An Asset event from outside any DAG (as an external producer would send one)."""
        body: dict[str, Any] = self._send(
            "POST", "/api/v2/assets/events", json={"asset_id": self.asset_id(uri), "extra": extra}
        ).json()
        return body
