"""A real Ray head on loopback for integration tests, in its own process group and temp dir,
so that stopping it never touches another Ray on the machine. Process handling is the
demo's `ManagedService` (start, wait for the health URL, stop the whole group).

It runs with token authentication (RAY_AUTH_MODE=token), as every deployment of this
project does: a client without the token is refused, so the tests prove the project's
clients send it."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from serving.runtime.ports import free_port
from training.jobs.auth import new_token, ray_auth_env
from training.jobs.local_head import head_command
from training.ops.demo.services import ManagedService

__all__ = ["RayHead", "free_port", "ray_head"]


@dataclass(frozen=True)
class RayHead:
    address: str
    token: str
    log: Path

    @property
    def connection_uri(self) -> str:
        """The `toolrl_ray` Airflow connection: the Jobs API, the token as its password."""
        return self.address.replace("http://", f"http://:{self.token}@", 1)


@contextmanager
def ray_head(
    tmp: Path,
    num_cpus: int = 2,
    timeout_s: float = 90.0,
    extra_env: dict[str, str] | None = None,
) -> Iterator[RayHead]:
    """Start `ray start --head --block` with token auth; yield it; stop the whole group."""
    bin_dir = Path(sys.executable).parent
    port, dashboard = free_port(), free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    address = f"http://127.0.0.1:{dashboard}"
    # jobs run `python -m ...` through the head's shell: this venv's python must come first
    token = new_token()
    env = {
        **ray_auth_env(token),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DEDUP_LOGS": "0",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        **(extra_env or {}),  # inherited by the job drivers (e.g. an MLflow identity)
    }
    head = ManagedService(
        "ray head",
        head_command(bin_dir / "ray", port, dashboard, tmp / "ray", num_cpus),
        f"{address}/api/version",
        tmp / "ray-head.log",
        env,
        start_timeout_s=timeout_s,
    )
    head.start()
    try:
        yield RayHead(address, token, tmp / "ray-head.log")
    finally:
        head.stop(grace_s=30)
