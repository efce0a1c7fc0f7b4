"""RayJobsHook: the `toolrl_ray` connection -> a Ray `JobSubmissionClient`.

The connection's host and port are the Jobs API (the head's dashboard port); its password is
the cluster's token when Ray runs with RAY_AUTH_MODE=token. The token stays in the
connection: it is sent as a header, never put in a job's runtime_env, a log or XCom."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

DEFAULT_CONN_ID = "toolrl_ray"


def address_from_connection(conn: Any) -> str:
    """`http://host:port` from an Airflow connection (the head's dashboard/Jobs API port)."""
    host = conn.host or "127.0.0.1"
    if "://" in host:
        return f"{host}:{conn.port}" if conn.port else host
    scheme = (conn.schema or "http") if conn.schema in (None, "", "http", "https") else "http"
    return f"{scheme}://{host}:{conn.port or 8265}"


class RayJobsHook(BaseHook):
    conn_name_attr = "ray_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "http"
    hook_name = "Ray Jobs"

    def __init__(self, ray_conn_id: str = DEFAULT_CONN_ID) -> None:
        super().__init__()
        self.ray_conn_id = ray_conn_id

    def address(self) -> str:
        return address_from_connection(self.get_connection(self.ray_conn_id))

    def get_client(self) -> Any:
        from training.jobs.submit import connect

        conn = self.get_connection(self.ray_conn_id)
        return connect(address_from_connection(conn), str(conn.password or "") or None)
