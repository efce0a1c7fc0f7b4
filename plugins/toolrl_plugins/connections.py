"""Read toolrl's Airflow connections (at task run time only, never at parse time)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook


def http_url(conn_id: str) -> str:
    """`scheme://host:port/path` from an http connection (path from the schema field)."""
    conn: Any = BaseHook.get_connection(conn_id)
    host = conn.host or "127.0.0.1"
    if "://" in host:
        base = host.rstrip("/")
    else:
        base = f"http://{host}:{conn.port}" if conn.port else f"http://{host}"
    return f"{base}/{conn.schema.strip('/')}" if conn.schema else base


def password(conn_id: str) -> str | None:
    conn: Any = BaseHook.get_connection(conn_id)
    return str(conn.password) if conn.password else None


def mcp_endpoint() -> tuple[str, str | None]:
    """The MCP server URL and bearer token (the connection's password)."""
    return http_url("toolrl_mcp"), password("toolrl_mcp")


def mlflow_uri() -> str:
    return http_url("toolrl_mlflow")
