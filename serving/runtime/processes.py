"""Child processes in their own process group: start one, signal it, stop it for good.

Why a process group: the servers the project starts (vLLM, `transformers serve`, the CPU
engine, Airflow, MLflow, Ray, Chromium, stdio MCP servers launched through `npx` or `uvx`)
spawn workers of their own. Stopping only the parent leaves those holding the GPU, a port or
a task, so every stop here signals the whole group: SIGTERM first (a clean shutdown), SIGKILL
for whatever is still there after a grace period. The wait covers the group, not just the
leader, so a worker that ignores SIGTERM after its parent exited is killed too.

A process is given as its `subprocess.Popen` when there is one (it is then reaped through
it), or as the pid of a group leader (a service recorded in a file by another command, a
`posix_spawn` child). A process group's id is its leader's pid, so both name the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)

KILL_WAIT_S = 10.0
"""How long to wait for the group to go after SIGKILL before giving up with a warning (a
process in uninterruptible sleep, e.g. on a hung NFS mount, ignores even SIGKILL)."""
POLL_S = 0.05

Process = subprocess.Popen[Any] | int
"""A started child (reaped through it) or the pid of a process-group leader."""
Redirect = int | IO[Any] | None
"""What `subprocess.Popen` accepts for stdin, stdout and stderr."""


def start_process_group(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: Redirect = None,
    stdout: Redirect = None,
    stderr: Redirect = None,
    cwd: str | Path | None = None,
    umask: int = -1,
) -> subprocess.Popen[bytes]:
    """Start `command` as the leader of a new session and process group (its pgid is its
    pid), so `stop_process_group` reaches every process it spawns and a Ctrl-C meant for
    the caller's terminal group does not reach it. `env` is the whole environment (None:
    inherit this process's)."""
    return subprocess.Popen(
        list(command),
        env=None if env is None else dict(env),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        umask=umask,
        start_new_session=True,
    )


def signal_process_group(process: Process, sig: int) -> bool:
    """Send `sig` to the process's whole group; False when the group is gone already."""
    try:
        os.killpg(_pid(process), sig)
    except ProcessLookupError:
        return False
    return True


def process_group_running(process: Process) -> bool:
    """Whether any process of the group still runs. An exited leader is reaped first; a
    zombie does not count (it has exited and only waits for a parent to read its status)."""
    _reap(process)
    return _group_running(_pid(process))


def stop_process_group(
    process: Process, grace_s: float, *, kill_wait_s: float = KILL_WAIT_S
) -> None:
    """SIGTERM the group, wait up to `grace_s` for every process of it to end, SIGKILL what
    is left and wait up to `kill_wait_s` more. Returns at once when a `Popen`'s leader has
    already exited (its pid may belong to someone else by now), so calling it twice is safe.
    """
    if isinstance(process, subprocess.Popen) and process.poll() is not None:
        return
    if not signal_process_group(process, signal.SIGTERM):
        _reap(process)
        return
    if _wait_group_sync(process, grace_s):
        return
    if signal_process_group(process, signal.SIGKILL) and not _wait_group_sync(process, kill_wait_s):
        logger.warning(
            "process group %d still runs %.0f s after SIGKILL", _pid(process), kill_wait_s
        )


async def stop_process_group_async(
    process: asyncio.subprocess.Process, grace_s: float, *, kill_wait_s: float = KILL_WAIT_S
) -> None:
    """`stop_process_group` for an asyncio child, without blocking the event loop. The
    leader is reaped by asyncio's child watcher (waiting for it here would steal its exit
    status), so this waits through `process.wait()` and then for the rest of the group."""
    if process.returncode is not None:
        return
    if not signal_process_group(process.pid, signal.SIGTERM):
        return
    if await _wait_group_async(process, grace_s):
        return
    if signal_process_group(process.pid, signal.SIGKILL) and not await _wait_group_async(
        process, kill_wait_s
    ):
        logger.warning("process group %d still runs %.0f s after SIGKILL", process.pid, kill_wait_s)


# ---- internals ------------------------------------------------------------------------------
def _pid(process: Process) -> int:
    return process if isinstance(process, int) else process.pid


def _reap(process: Process) -> None:
    """Collect an exited leader's status, so its zombie stops holding the group open."""
    if isinstance(process, subprocess.Popen):
        process.poll()
        return
    with contextlib.suppress(ChildProcessError):  # not our child, or reaped already
        os.waitpid(process, os.WNOHANG)


def _wait_group_sync(process: Process, timeout_s: float) -> bool:
    """Whether the group ends before `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    while process_group_running(process):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


async def _wait_group_async(process: asyncio.subprocess.Process, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), timeout_s)
    while _group_running(process.pid):  # never reaps: that is asyncio's watcher's job
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


def _group_running(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member runs as another user: it exists
    leader = _stat(pgid)
    if leader is not None and leader[0] != "Z":
        return True  # the usual case while stopping, answered without scanning /proc
    return _member_running(pgid)


def _member_running(pgid: int) -> bool:
    """Whether a process of group `pgid` is not a zombie, read from /proc (Linux). Without
    /proc every member counts as running, which only makes a stop wait its full grace."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        fields = _stat(int(entry)) if entry.isdigit() else None
        if fields is not None and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _stat(pid: int) -> list[str] | None:
    """Fields 3 onwards of /proc/PID/stat (state, ppid, pgrp, ...); None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ")"
    fields = stat.rsplit(")", 1)[-1].split()
    return fields if len(fields) > 2 else None
