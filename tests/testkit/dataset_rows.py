"""Rows of the built-in dataset for tests that need rows, not a dataset folder: the
generator writes a version (parquet, manifest, call store), so it runs in a scratch folder
that is removed afterwards."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from training.data.packs.generate import generate_builtin_dataset


def builtin_rows(n: int, seed: int, **settings: Any) -> list[dict[str, Any]]:
    """The rows `toolrl data generate --n N --seed SEED` writes (the `toolrl` pack)."""
    with tempfile.TemporaryDirectory(prefix="toolrl-rows-") as scratch:
        made = generate_builtin_dataset(Path(scratch), n=n, seed=seed, progress=False, **settings)
        return made.rows


def generated_dataset(out: Path, n: int) -> Path:
    """A dataset folder at `out` from `toolrl data generate --n N --quiet` run as a user runs
    it (a subprocess of the CLI module), for tests that train on one; fails with its stderr."""
    command = [sys.executable, "-m", "training.cli", "data", "generate", "--quiet"]
    generated = subprocess.run(
        [*command, "--out", str(out), "--n", str(n)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert generated.returncode == 0, generated.stderr
    return out
