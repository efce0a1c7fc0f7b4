"""Rows of the built-in dataset for tests that need rows, not a dataset folder: the
generator writes a version (parquet, manifest, call store), so it runs in a scratch folder
that is removed afterwards."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from training.data.packs.generate import generate_builtin_dataset


def builtin_rows(n: int, seed: int, **settings: Any) -> list[dict[str, Any]]:
    """The rows `toolrl data generate --n N --seed SEED` writes (the `toolrl` pack)."""
    with tempfile.TemporaryDirectory(prefix="toolrl-rows-") as scratch:
        made = generate_builtin_dataset(Path(scratch), n=n, seed=seed, progress=False, **settings)
        return made.rows
