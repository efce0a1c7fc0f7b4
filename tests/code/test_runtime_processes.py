"""serving/runtime/processes.py against real process groups: a leader and a worker that
ignore SIGTERM end up killed within the grace; a clean one ends on SIGTERM; the pid form
and the asyncio form behave the same."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serving.runtime.processes import (
    process_group_running,
    signal_process_group,
    start_process_group,
    stop_process_group,
    stop_process_group_async,
)

pytestmark = pytest.mark.timeout(60)

STUBBORN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)
POLITE = "import sys, time\nprint('ready', flush=True)\ntime.sleep(60)\n"
# a leader that exits on SIGTERM but leaves a worker (same group) that ignores it
ORPHANING = (
    "import signal, subprocess, sys, time\n"
    "worker = subprocess.Popen([sys.executable, '-c', "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    'print("ready", flush=True); time.sleep(60)\'])\n'
    "print(worker.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def _start(code: str) -> subprocess.Popen[bytes]:
    process = start_process_group([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert process.stdout is not None
    process.stdout.readline()  # handlers are installed: the test does not race the start
    return process


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    process = _start(STUBBORN)
    assert os.getpgid(process.pid) == process.pid  # its own group
    started = time.monotonic()
    stop_process_group(process, grace_s=0.5)
    took = time.monotonic() - started
    assert process.returncode == -signal.SIGKILL
    assert 0.5 <= took < 5.0
    assert not process_group_running(process)


def test_a_polite_child_ends_on_sigterm_without_waiting_the_grace() -> None:
    process = _start(POLITE)
    started = time.monotonic()
    stop_process_group(process, grace_s=30.0)
    assert process.returncode == -signal.SIGTERM
    assert time.monotonic() - started < 5.0
    stop_process_group(process, grace_s=30.0)  # twice is safe


def test_a_worker_left_behind_by_its_leader_is_killed_too() -> None:
    process = start_process_group([sys.executable, "-c", ORPHANING], stdout=subprocess.PIPE)
    assert process.stdout is not None
    worker = int(process.stdout.readline())
    assert process.stdout.readline().strip() == b"ready"  # the worker's handler is set
    stop_process_group(process, grace_s=0.5)
    assert process.returncode == -signal.SIGTERM  # the leader went politely
    deadline = time.monotonic() + 5
    while not _gone(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(worker), "the worker that ignored SIGTERM must not outlive the stop"


def test_the_pid_form_stops_and_reaps_a_stubborn_child() -> None:
    process = _start(STUBBORN)
    stop_process_group(process.pid, grace_s=0.3)  # as a service recorded in a file
    assert _gone(process.pid)
    assert not signal_process_group(process.pid, 0)  # reaped: the group no longer exists


def test_the_asyncio_form_kills_a_stubborn_child() -> None:
    async def scenario() -> int | None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", STUBBORN, stdout=subprocess.PIPE, start_new_session=True
        )
        assert proc.stdout is not None
        await proc.stdout.readline()
        await stop_process_group_async(proc, grace_s=0.3, kill_wait_s=5.0)
        return proc.returncode

    assert asyncio.run(scenario()) == -signal.SIGKILL


def test_stopping_what_already_exited_is_a_no_op() -> None:
    process = start_process_group([sys.executable, "-c", "pass"])
    process.wait()
    stop_process_group(process, grace_s=5.0)
    stop_process_group(process.pid, grace_s=5.0)
    assert process.returncode == 0
