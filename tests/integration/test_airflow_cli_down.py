"""`toolrl demo --keep-running` leaves its services up and records them; `toolrl airflow down`
then stops every one of them (and says so), and a second `down` finds nothing to stop."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from serving.runtime.ports import free_port
from training.ops.airflow.layout import AirflowLayout
from training.ops.demo.run import _keep_running
from training.ops.demo.services import ManagedService, ServiceStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
BIN = Path(sys.executable).parent


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_keep_running_then_down_stops_every_recorded_service(tmp_path: Path) -> None:
    AirflowLayout(tmp_path).home.mkdir(parents=True)
    stack = ServiceStack()
    services = []
    for name in ("MLflow stand-in", "MCP stand-in"):
        port = free_port()
        service = ManagedService(
            name,
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            f"http://127.0.0.1:{port}/",
            tmp_path / f"{port}.log",
        )
        stack.start(service)
        services.append(service)
    _keep_running(stack, tmp_path)
    assert stack.services == []  # detached: leaving the demo's stack stops nothing
    pids = [s.process.pid for s in services if s.process is not None]
    assert all(_alive(pid) for pid in pids)

    down = [str(BIN / "toolrl"), "airflow", "down", "--workdir", str(tmp_path)]
    first = subprocess.run(down, capture_output=True, text=True, timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    assert "MLflow stand-in" in first.stdout and "MCP stand-in" in first.stdout
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in pids)
    second = subprocess.run(down, capture_output=True, text=True, timeout=60, check=False)
    assert "nothing running" in second.stdout


def test_status_without_a_deployment_says_how_to_start_one(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(BIN / "toolrl"), "airflow", "status", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "toolrl airflow up" in done.stdout
