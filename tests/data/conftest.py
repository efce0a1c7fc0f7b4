from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from training.data.packs.generate import generate_builtin_dataset


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One valid dataset for the whole session (read-only: copy it before breaking it)."""
    out = tmp_path_factory.mktemp("dataset")
    manifest = generate_builtin_dataset(out, n=600, seed=7, progress=False).manifest
    return out, manifest


@pytest.fixture
def dataset_copy(small_dataset: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(small_dataset[0], target, ignore=shutil.ignore_patterns("validation"))
    return target
