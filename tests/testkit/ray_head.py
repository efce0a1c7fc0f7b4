"""A real Ray head on loopback for integration tests, in its own process group and temp dir,
so that stopping it never touches another Ray on the machine. Process handling is the
demo's `ManagedService` (start, wait for the health URL, stop the whole group)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from training.demo.services import ManagedService, free_port

__all__ = ["free_port", "ray_head"]


@contextmanager
def ray_head(tmp: Path, num_cpus: int = 2, timeout_s: float = 90.0) -> Iterator[str]:
    """Start `ray start --head --block`; yield the Jobs API address; stop the whole group."""
    bin_dir = Path(sys.executable).parent
    port, dashboard = free_port(), free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    address = f"http://127.0.0.1:{dashboard}"
    # jobs run `python -m ...` through the head's shell: this venv's python must come first
    env = {
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DEDUP_LOGS": "0",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    head = ManagedService(
        "ray head",
        [
            str(bin_dir / "ray"),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}",
            f"--num-cpus={num_cpus}",
            "--include-dashboard=true",
            f"--temp-dir={tmp / 'ray'}",
            "--disable-usage-stats",
        ],
        f"{address}/api/version",
        tmp / "ray-head.log",
        env,
        start_timeout_s=timeout_s,
    )
    head.start()
    try:
        yield address
    finally:
        head.stop(grace_s=30)
