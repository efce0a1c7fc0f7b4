"""Start, check and stop Airflow's four services as detached process groups.

`up` returns once every service reports healthy through the api-server's
`/api/v2/monitor/health` (the scheduler, triggerer and dag-processor heartbeat into the
metadata DB; the api-server reads those heartbeats), so a caller never races a half-started
deployment. Each service runs in its own process group, so stopping one (or killing it, in
the fault tests) never takes a sibling down, and `down` leaves no orphaned task runner.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from serving.runtime.processes import signal_process_group, start_process_group, stop_process_group
from training.ops.airflow.layout import (
    BIN,
    AirflowLayout,
    AirflowPorts,
    ensure_login,
    lock_down,
    private_dir,
    service_env,
    use_wal,
)
from training.pipeline.config import PipelineConfig

SERVICES: tuple[str, ...] = ("api-server", "scheduler", "dag-processor", "triggerer")
"""In start order: the api-server first, because the others' task runners call its
execution API; the heartbeating three report their health through it."""

HEALTH_KEYS = {"scheduler": "scheduler", "triggerer": "triggerer", "dag-processor": "dag_processor"}


class AirflowServiceError(RuntimeError):
    """A service did not start, died or is down; the message names it and its log."""


@dataclass
class RunningService:
    name: str
    pid: int
    log: str
    started_at: float

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not _is_zombie(self.pid)


def _is_zombie(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] == "Z"


@dataclass
class Deployment:
    """What `services.json` records: enough for `status` and `down` from another shell."""

    api_url: str
    ports: dict[str, int]
    services: dict[str, RunningService]

    def save(self, layout: AirflowLayout) -> None:
        payload = {
            "api_url": self.api_url,
            "ports": self.ports,
            "services": {name: asdict(s) for name, s in self.services.items()},
        }
        tmp = layout.registry.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload, indent=2))
        tmp.chmod(0o600)
        tmp.replace(layout.registry)

    @classmethod
    def load(cls, layout: AirflowLayout) -> Deployment | None:
        try:
            raw = json.loads(layout.registry.read_text())
            return cls(
                api_url=str(raw["api_url"]),
                ports={str(k): int(v) for k, v in raw["ports"].items()},
                services={name: RunningService(**value) for name, value in raw["services"].items()},
            )
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise AirflowServiceError(
                f"{layout.registry} is unreadable ({exc}); stop stray services by hand "
                "(`pkill -f 'airflow (api-server|scheduler|dag-processor|triggerer)'`) and "
                "delete the file"
            ) from exc


def health(api_url: str, timeout_s: float = 3.0) -> dict[str, Any] | None:
    """The api-server's health document, or None if the api-server does not answer."""
    try:
        with urllib.request.urlopen(  # noqa: S310 - loopback URL from our own registry
            f"{api_url}/api/v2/monitor/health", timeout=timeout_s
        ) as response:
            body: dict[str, Any] = json.loads(response.read())
            return body
    except (urllib.error.URLError, OSError, ValueError):
        return None


def service_states(deployment: Deployment) -> dict[str, str]:
    """Each service's state: `healthy`, `unhealthy` (alive, no fresh heartbeat), `down`."""
    report = health(deployment.api_url)
    states: dict[str, str] = {}
    for name in SERVICES:
        service = deployment.services.get(name)
        if service is None or not service.alive():
            states[name] = "down"
        elif name == "api-server":
            states[name] = "healthy" if report is not None else "unhealthy"
        else:
            entry = (report or {}).get(HEALTH_KEYS[name]) or {}
            states[name] = "healthy" if entry.get("status") == "healthy" else "unhealthy"
    return states


def _migrate(env: dict[str, str], layout: AirflowLayout) -> None:
    done = subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        umask=0o077,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        log = layout.log_of("db-migrate")
        log.write_text(done.stdout + done.stderr)
        raise AirflowServiceError(f"`airflow db migrate` failed; see {log}")


def _spawn(name: str, env: dict[str, str], layout: AirflowLayout) -> RunningService:
    command = [str(BIN / "airflow"), name]
    if name == "api-server":
        command += ["--host", "127.0.0.1", "--port", env["AIRFLOW__API__PORT"], "--workers", "1"]
    log = layout.log_of(name)
    with os.fdopen(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as sink:
        process = start_process_group(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            umask=0o077,
        )
    return RunningService(name, process.pid, str(log), time.time())


def wait_healthy(
    deployment: Deployment,
    names: Iterable[str],
    timeout_s: float,
    on_tick: Callable[[dict[str, str]], None] | None = None,
) -> float:
    """Block until the named services are healthy; seconds it took. Fails fast, naming the
    service and its log, when one exits while starting."""
    wanted = list(names)
    started = time.monotonic()
    while True:
        states = service_states(deployment)
        if on_tick is not None:
            on_tick(states)
        if all(states[n] == "healthy" for n in wanted):
            return time.monotonic() - started
        for name in wanted:
            service = deployment.services[name]
            if not service.alive():
                raise AirflowServiceError(
                    f"Airflow {name} exited while starting; see {service.log}"
                )
        if time.monotonic() - started > timeout_s:
            late = [n for n in wanted if states[n] != "healthy"]
            logs = ", ".join(f"{n}: {deployment.services[n].log}" for n in late)
            raise AirflowServiceError(
                f"Airflow {', '.join(late)} not healthy after {timeout_s:.0f}s; see {logs}"
            )
        time.sleep(1.0)


@dataclass(frozen=True)
class UpResult:
    deployment: Deployment
    seconds_to_healthy: float
    new_password: str | None
    """Set only on the first `up` of this home: the generated login, to print once."""


def up(
    layout: AirflowLayout,
    ports: AirflowPorts,
    config: PipelineConfig,
    config_path: Path | None,
    on_tick: Callable[[dict[str, str]], None] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> UpResult:
    """Start the four services (a no-op when all four are already healthy in this home).
    `extra_env` reaches every service and task (e.g. the model name the tasks register)."""
    private_dir(layout.workdir / "logs")
    private_dir(layout.home)
    private_dir(layout.logs)
    existing = Deployment.load(layout)
    if existing is not None:
        if all(s == "healthy" for s in service_states(existing).values()):
            return UpResult(existing, 0.0, None)
        if any(s.alive() for s in existing.services.values()):
            raise AirflowServiceError(
                f"a partly running deployment is recorded in {layout.registry}: "
                f"{service_states(existing)}; run `toolrl airflow down` first"
            )
    env = {**(extra_env or {}), **service_env(layout, ports, config, config_path)}
    started = time.monotonic()
    new_password = ensure_login(layout)
    _migrate(env, layout)
    use_wal(layout.database)
    lock_down(layout)
    deployment = Deployment(
        api_url=ports.api_url,
        ports={
            "api": ports.api,
            "worker_logs": ports.worker_logs,
            "trigger_logs": ports.trigger_logs,
        },
        services={},
    )
    try:
        for name in SERVICES:
            deployment.services[name] = _spawn(name, env, layout)
            deployment.save(layout)
        wait_healthy(deployment, SERVICES, config.airflow.healthy_within_s, on_tick)
    except BaseException:
        stop(layout, deployment)
        raise
    lock_down(layout)
    return UpResult(deployment, time.monotonic() - started, new_password)


def restart(
    layout: AirflowLayout,
    name: str,
    config: PipelineConfig,
    config_path: Path | None,
    extra_env: Mapping[str, str] | None = None,
) -> RunningService:
    """Start one service again (after a crash, or a kill in the fault tests)."""
    deployment = Deployment.load(layout)
    if deployment is None:
        raise AirflowServiceError(f"no deployment recorded in {layout.registry}")
    ports = AirflowPorts(
        deployment.ports["api"], deployment.ports["worker_logs"], deployment.ports["trigger_logs"]
    )
    if deployment.services[name].alive():
        raise AirflowServiceError(
            f"Airflow {name} is still running (pid {deployment.services[name].pid})"
        )
    env = {**(extra_env or {}), **service_env(layout, ports, config, config_path)}
    deployment.services[name] = _spawn(name, env, layout)
    deployment.save(layout)
    wait_healthy(deployment, [name], config.airflow.healthy_within_s)
    return deployment.services[name]


def kill(layout: AirflowLayout, name: str, sig: int = signal.SIGKILL) -> None:
    """Send a signal to one service's whole process group (SIGKILL: a crash, no cleanup)."""
    deployment = Deployment.load(layout)
    if deployment is None or name not in deployment.services:
        raise AirflowServiceError(f"Airflow {name} is not recorded in {layout.registry}")
    service = deployment.services[name]
    signal_process_group(service.pid, sig)
    deadline = time.monotonic() + 30
    while service.alive() and time.monotonic() < deadline:
        time.sleep(0.2)


def stop(
    layout: AirflowLayout, deployment: Deployment | None = None, grace_s: float = 15.0
) -> list[str]:
    """Stop every recorded service, in reverse start order; the names that were running."""
    deployment = deployment or Deployment.load(layout)
    if deployment is None:
        return []
    stopped = []
    for name in reversed(SERVICES):
        service = deployment.services.get(name)
        if service is None:
            continue
        if service.alive():
            stopped.append(name)
        stop_process_group(service.pid, grace_s)  # the group: task runners it forked, too
    layout.registry.unlink(missing_ok=True)
    return stopped


def record_companions(layout: AirflowLayout, companions: list[RunningService]) -> None:
    """Services started beside Airflow (MLflow, Ray, MCP) that `down` should stop as well:
    the demo's `--keep-running` leaves them up for browsing."""
    path = layout.home / "companions.json"
    path.write_text(json.dumps([asdict(c) for c in companions], indent=2))
    path.chmod(0o600)


def stop_companions(layout: AirflowLayout, grace_s: float = 15.0) -> list[str]:
    path = layout.home / "companions.json"
    try:
        companions = [RunningService(**c) for c in json.loads(path.read_text())]
    except FileNotFoundError:
        return []
    except (ValueError, TypeError) as exc:
        raise AirflowServiceError(
            f"{path} is unreadable ({exc}); stop those services by hand"
        ) from exc
    stopped = []
    for companion in reversed(companions):
        if companion.alive():
            stopped.append(companion.name)
        stop_process_group(companion.pid, grace_s)
    path.unlink(missing_ok=True)
    return stopped
