"""The exported model is the checkpoint's (stochastically rounded) working copy, byte for
byte, with the tokenizer and no optimizer state; the nearest-rounded masters would undo
most of GRPO's sub-bf16-step update (measured: `training/cpu_backend/export.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.cpu_backend.export import export_model
from training.model.tiny import TinyModelConfig, build_tiny_model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("export")
    actor = build_tiny_model(root / "actor", TinyModelConfig(hidden_size=64, num_layers=2))
    (actor / "optimizer.pt").write_bytes(b"optimizer state")
    (actor / "rng_state.pth").write_bytes(b"rng")
    return actor


def test_the_export_is_the_working_copy_without_the_training_state(
    checkpoint: Path, tmp_path: Path
) -> None:
    out = export_model(checkpoint, tmp_path / "model")
    assert (out / "model.safetensors").read_bytes() == (
        checkpoint / "model.safetensors"
    ).read_bytes()
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()
    assert not (out / "optimizer.pt").exists() and not (out / "rng_state.pth").exists()


def test_a_new_export_replaces_the_old_one_whole(checkpoint: Path, tmp_path: Path) -> None:
    target = tmp_path / "model"
    target.mkdir()
    (target / "stale.bin").write_bytes(b"from an earlier run")
    export_model(checkpoint, target)
    assert not (target / "stale.bin").exists()
    assert not (tmp_path / ".model.tmp").exists()


def test_the_export_is_readable_by_the_user_who_registers_it(tmp_path: Path) -> None:
    """Checkpoint weights are written 0600; on a cluster Airflow (another uid) registers the
    export, so the shipped files take the umask's mode, not the checkpoint's."""
    import os
    import stat

    source = tmp_path / "actor"
    source.mkdir()
    for name in ("config.json", "model.safetensors"):
        (source / name).write_bytes(b"{}")
    (source / "model.safetensors").chmod(0o600)
    old = os.umask(0o022)
    try:
        out = export_model(source, tmp_path / "model")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((out / "model.safetensors").stat().st_mode)
    assert mode & stat.S_IRGRP and mode & stat.S_IROTH, oct(mode)
    assert (out / "config.json").read_bytes() == b"{}"
