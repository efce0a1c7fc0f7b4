"""The reward side of the format-drift guard: append each scored rollout's call counts to
`$TOOLRL_DRIFT_DIR/<pid>.jsonl` (set by the job driver; see training/jobs/drift_guard.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

DRIFT_DIR_ENV = "TOOLRL_DRIFT_DIR"
_sink: tuple[int, IO[str]] | None = None
_ENV_KEY = os.environ.encodekey(DRIFT_DIR_ENV)


def _drift_dir() -> str | None:
    """`os.environ.get(DRIFT_DIR_ENV)`, read on every call (a test or the driver may set it
    at any time). It runs once per scored rollout and is usually unset, where
    `os.environ.get` raises and catches a KeyError inside (~0.8 us, 2% of the reward's
    time): the mapping `os.environ` reads from (CPython's `_Environ._data`, keyed by
    `encodekey`) answers the same without one. Falls back to `os.environ.get` elsewhere."""
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict):
        return os.environ.get(DRIFT_DIR_ENV)
    raw = data.get(_ENV_KEY)
    return None if raw is None else os.environ.decodevalue(raw)


def record_sample(breakdown: dict[str, Any]) -> None:
    """Append one rollout's call counts; a no-op unless the job driver set the directory."""
    global _sink
    directory = _drift_dir()
    if not directory:
        return
    pid = os.getpid()
    if _sink is None or _sink[0] != pid:  # one file per process, reopened after a fork
        Path(directory).mkdir(parents=True, exist_ok=True)
        _sink = (pid, open(Path(directory) / f"{pid}.jsonl", "a", buffering=1))  # noqa: SIM115
    calls = int(float(breakdown.get("num_calls", 0)))
    malformed = int(float(breakdown.get("malformed_calls", 0)))
    _sink[1].write(json.dumps({"calls": calls, "malformed": malformed}) + "\n")
