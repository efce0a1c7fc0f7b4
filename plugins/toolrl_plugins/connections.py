"""Read toolrl's Airflow connections and Variables (at task run time only, never at parse
time)."""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import BaseHook, Variable


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
    """The tracking server's URL. The connection's login and password, when set, become
    MLflow's basic-auth credentials for this task process (MLFLOW_TRACKING_USERNAME /
    _PASSWORD, which MLflow's client reads on every request), so they never need to be part
    of a URI that MLflow would record."""
    conn: Any = BaseHook.get_connection("toolrl_mlflow")
    if conn.login:
        os.environ["MLFLOW_TRACKING_USERNAME"] = str(conn.login)
        os.environ["MLFLOW_TRACKING_PASSWORD"] = str(conn.password or "")
    return http_url("toolrl_mlflow")


def _path_variable(key: str) -> str:
    """A path-valued Variable (serving/settings.py), stripped; empty when unset or blank."""
    return str(Variable.get(key, default="") or "").strip()


def training_spec_variable() -> str:
    """The `toolrl_training_spec` Variable, empty when unset: which TrainingSpec scheduled
    runs train, switchable without a new pipeline config."""
    return _path_variable("toolrl_training_spec")


def gate_thresholds_variable() -> str:
    """The `toolrl_gate_thresholds` Variable, empty when unset: which gate thresholds file
    scheduled runs are judged by. A spec switched by the Variable above often needs its own
    bars (the CPU demo spec's are training/specs/thresholds_demo.yaml), and a run started by
    the Asset event has no params to carry them."""
    return _path_variable("toolrl_gate_thresholds")
