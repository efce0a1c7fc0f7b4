"""Where one local Airflow deployment keeps its files, and the environment its services share.

Why one place: the four services (api-server, scheduler, dag-processor, triggerer) must agree
on the metadata database, the JWT secret, the execution API URL and the connections. If each
were started with a hand-built environment, one mismatch (the execution API on another port,
a connection missing from the triggerer) fails tasks in ways that surface far from the cause.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from serving.settings import CONNECTIONS, VARIABLES
from training.pipeline.config import CONFIG_ENV, REPO_ROOT, PipelineConfig

BIN = Path(sys.executable).parent
UI_USER = "admin"


@dataclass(frozen=True)
class AirflowLayout:
    """The files of one deployment, all under `<workdir>/airflow` (mode 0700)."""

    workdir: Path

    @property
    def home(self) -> Path:
        return self.workdir / "airflow"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs" / "airflow"

    @property
    def registry(self) -> Path:
        """Which services run, with their pids, ports and logs (`toolrl airflow status`)."""
        return self.home / "services.json"

    @property
    def passwords(self) -> Path:
        """The UI/API login, in the simple auth manager's password-file format (mode 0600)."""
        return self.home / "ui_login.json"

    @property
    def database(self) -> Path:
        return self.home / "airflow.db"

    def log_of(self, service: str) -> Path:
        return self.logs / f"{service}.log"


@dataclass(frozen=True)
class AirflowPorts:
    """The api-server's port, and the two log servers' ports (Airflow's defaults, 8793 and
    8794, would clash between two deployments on one machine, e.g. a demo beside the tests)."""

    api: int
    worker_logs: int
    trigger_logs: int

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api}"


def connection_uris(config: PipelineConfig) -> dict[str, str]:
    """Every registered connection as its `AIRFLOW_CONN_*` value: the pipeline config's
    `connections` where set, else the embedded default; an empty default leaves it unset."""
    unknown = set(config.connections) - {c.conn_id for c in CONNECTIONS}
    if unknown:
        known = ", ".join(c.conn_id for c in CONNECTIONS)
        raise ValueError(
            f"unknown connection id(s) {sorted(unknown)} in the pipeline config: {known}"
        )
    values = {c.env_var: config.connections.get(c.conn_id, c.default_uri) for c in CONNECTIONS}
    return {key: value for key, value in values.items() if value}


def service_env(
    layout: AirflowLayout, ports: AirflowPorts, config: PipelineConfig, config_path: Path | None
) -> dict[str, str]:
    """The environment all four services and their task processes run with."""
    env = {
        "AIRFLOW_HOME": str(layout.home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        # 32 pre-forked workers by default (1.2 GB PSS); the loop runs a handful of tasks at once
        "AIRFLOW__CORE__PARALLELISM": str(config.airflow.parallelism),
        "AIRFLOW__CORE__SQL_ALCHEMY_CONN": f"sqlite:///{layout.database}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{ports.api_url}/execution/",
        "AIRFLOW__API__BASE_URL": ports.api_url,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(ports.api),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{UI_USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(layout.passwords),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(layout.logs / "tasks"),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(ports.worker_logs),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(ports.trigger_logs),
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": str(config.airflow.dag_refresh_s),
        "AIRFLOW__TRIGGERER__CAPACITY": "50",
        "PYTHONPATH": str(REPO_ROOT),
        # `airflow` starts sub-commands (task runners) by name from PATH
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAY_USAGE_STATS_ENABLED": "0",
        "TOKENIZERS_PARALLELISM": "false",
        **connection_uris(config),
        **{v.env_var: v.default for v in VARIABLES},
    }
    if config_path is not None:
        env[CONFIG_ENV] = str(config_path.resolve())
    return env


def private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(stat.S_IRWXU)
    return path


def ensure_login(layout: AirflowLayout) -> str | None:
    """Generate the UI login once; returns the password only when it was just created (so it
    is printed once), None when it already existed."""
    if layout.passwords.is_file():
        return None
    password = secrets.token_urlsafe(18)
    fd = os.open(layout.passwords, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({UI_USER: password}, handle)
    return password


def read_login(layout: AirflowLayout) -> tuple[str, str]:
    """(user, password) for the REST API, from the generated password file."""
    try:
        data = json.loads(layout.passwords.read_text())
        return UI_USER, str(data[UI_USER])
    except (OSError, ValueError, KeyError) as exc:
        raise FileNotFoundError(
            f"no Airflow login at {layout.passwords}: start the services with `toolrl airflow up`"
        ) from exc


def use_wal(database: Path) -> str:
    """Switch the SQLite metadata DB to write-ahead logging (persistent in the file): readers
    no longer block the writer, which is what four services on one file need."""
    with sqlite3.connect(database, timeout=30) as conn:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    return str(mode)


def lock_down(layout: AirflowLayout) -> None:
    """Nothing world- or group-readable: the DB holds connections, the cfg holds secrets."""
    for path in (layout.home, layout.logs):
        if path.exists():
            path.chmod(stat.S_IRWXU)
    for path in layout.home.glob("airflow.*"):
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
