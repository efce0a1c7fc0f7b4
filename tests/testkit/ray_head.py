"""A real Ray head on loopback for integration tests, in its own process group and temp dir,
so that stopping it never touches another Ray on the machine."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def ray_head(tmp: Path, num_cpus: int = 2, timeout_s: float = 90.0) -> Iterator[str]:
    """Start `ray start --head --block`; yield the Jobs API address; stop the whole group."""
    ray = Path(sys.executable).parent / "ray"
    port, dashboard = free_port(), free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    log = (tmp / "ray-head.log").open("w")
    # jobs run `python -m ...` through the head's shell: this venv's python must come first
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0", "PATH": path}
    process = subprocess.Popen(
        [
            str(ray),
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
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )
    address = f"http://127.0.0.1:{dashboard}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"ray head exited: {(tmp / 'ray-head.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{address}/api/version", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("ray head did not become ready")
            time.sleep(0.5)
        yield address
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(process.pid, signal.SIGKILL)
        log.close()
