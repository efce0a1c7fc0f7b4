"""Where a spec's portable references land in a job's workdir, for both backends.

A spec file names data relative to the job's workdir and may name the base model as
`tiny://<call_format>` (the tiny Qwen3 built locally), so the same YAML runs as a CPU demo, a
Ray job on a local head, or a verl job on a GPU node without editing paths. Both the CPU
backend and the verl entrypoint resolve through here, so they can never disagree.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from training.model.source import PACKAGE_SCHEME
from training.spec.model import TrainingSpec

TINY_SCHEME = "tiny://"
"""`model.path: tiny://hermes` (or `tiny://qwen3_coder`): build the tiny Qwen3 for that
call format in `<workdir>/base_model` instead of loading a model."""


def resolve_model(spec: TrainingSpec, workdir: Path) -> Path:
    """The base model directory: a `tiny://` model is built once (atomically) in the
    workdir; a `package://` model is converted once into the shared model cache."""
    path = spec.model.path
    if path.startswith(PACKAGE_SCHEME):
        from training.model.prepare import prepared_dir

        return prepared_dir(path)
    if not path.startswith(TINY_SCHEME):
        return Path(path)
    from training.model.tiny import TinyModelConfig, build_tiny_model

    call_format = path[len(TINY_SCHEME) :] or spec.model.call_format
    if call_format != spec.model.call_format:
        raise ValueError(
            f"model.path {path!r} names call format {call_format!r} but model.call_format is "
            f"{spec.model.call_format!r}"
        )
    target = workdir / "base_model"
    if (target / "model.safetensors").is_file():
        return target
    scratch = workdir / ".base_model.tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    build_tiny_model(
        scratch, TinyModelConfig(call_format=spec.model.call_format, seed=spec.cpu.seed)
    )
    shutil.rmtree(target, ignore_errors=True)
    scratch.rename(target)
    return target


def missing_data_files(spec: TrainingSpec) -> list[str]:
    """The spec's local train and test paths that do not exist (after `resolve_paths`):
    named before training starts, instead of a reader's traceback minutes into the job. A
    directory counts as there (a parquet dataset may be one); remote ones (`s3://...`) are
    left to the reader."""
    named = [*spec.data.train_files, *spec.data.test_files]
    return [path for path in named if "://" not in path and not Path(path).exists()]


def resolve_paths(spec: TrainingSpec, workdir: Path) -> TrainingSpec:
    """Relative data paths resolve against the workdir (so a spec file is portable)."""

    def absolute(path: str) -> str:
        return path if "://" in path or Path(path).is_absolute() else str(workdir / path)

    data = spec.data.model_copy(
        update={
            "train_files": [absolute(p) for p in spec.data.train_files],
            "test_files": [absolute(p) for p in spec.data.test_files],
        }
    )
    return spec.model_copy(update={"data": data})
