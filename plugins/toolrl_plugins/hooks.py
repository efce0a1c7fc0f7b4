"""RayJobsHook: the `toolrl_ray` connection -> a Ray `JobSubmissionClient`."""

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

        return connect(self.address())
