"""Run a `testkit` module as a process of its own, with the repository and `tests/` on its
path: for what only a fresh process shows (switches read once at start, a restart)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_testkit_module(
    module: str,
    argument: str,
    drop: Iterable[str] = (),
    extra: Mapping[str, str] | None = None,
    timeout_s: float = 180,
) -> subprocess.CompletedProcess[str]:
    """`python -m testkit.<module> <argument>` in this environment, less the variables in
    `drop`, plus `extra`; fails the test on a non-zero exit."""
    dropped = set(drop)
    env = {key: value for key, value in os.environ.items() if key not in dropped}
    env.update(extra or {})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), str(REPO)])
    return subprocess.run(
        [sys.executable, "-m", f"testkit.{module}", argument],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
    )
