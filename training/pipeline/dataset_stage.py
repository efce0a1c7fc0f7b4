"""The dataset stage as the DAG runs it: generate into staging, validate, publish.

A version is published (moved under `data_root/<version>`, mirrored to S3 when configured)
only after it validated; a failed validation leaves it in staging with its Data Docs. Each
stage returns its contract (`training.pipeline.contracts`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from training.data.packs.generate import generate_builtin_dataset
from training.data.validate import validate_dataset
from training.pipeline.config import PipelineConfig
from training.pipeline.contracts import GeneratedDataset, PublishedDataset, ValidatedDataset


class DatasetRejectedError(RuntimeError):
    """Validation failed; the message is the readable summary with the Data Docs path."""


def seed_for_run(run_key: str) -> int:
    """A different, reproducible seed per DAG run: scheduled runs regenerate new data."""
    import hashlib

    return int(hashlib.sha256(run_key.encode()).hexdigest()[:8], 16)


def generate_stage(
    config: PipelineConfig, run_key: str, rows: int | None = None
) -> GeneratedDataset:
    staging = Path(config.data_root) / "staging" / run_key.replace(":", "_").replace("+", "_")
    if staging.exists():
        shutil.rmtree(staging)  # a retried task starts clean; nothing is published yet
    if config.pack:
        return _generate_from_pack(config, staging, rows or config.dataset_rows, run_key)
    manifest = generate_builtin_dataset(
        staging,
        n=rows or config.dataset_rows,
        seed=seed_for_run(run_key),
        chinese_fraction=config.chinese_fraction,
        progress=False,
    ).manifest
    return GeneratedDataset(
        staging_dir=str(staging),
        dataset_version=manifest["dataset_version"],
        rows=manifest["rows"],
    )


def _generate_from_pack(
    config: PipelineConfig, staging: Path, rows: int, run_key: str
) -> GeneratedDataset:
    """A dataset version from the configured task pack: every expected call executed on the
    pack's server (started here, stopped after), recorded into the version's own call store,
    which training and evaluation replay."""
    from training.data.packs.generate import generate_from_sources
    from training.data.packs.loader import load_pack, resolve_pack

    assert config.pack is not None
    loaded = load_pack(resolve_pack(config.pack))
    sources = Path(config.pack_sources) if config.pack_sources else None
    dataset = generate_from_sources(
        loaded, staging, sources, n=rows, seed=seed_for_run(run_key), progress=False
    )
    manifest = dataset.manifest
    return GeneratedDataset(
        staging_dir=str(staging),
        dataset_version=manifest["dataset_version"],
        rows=manifest["rows"],
        pack=loaded.spec.pack,
        call_store_digest=manifest["call_store"]["digest"],
    )


def validate_stage(config: PipelineConfig, generated: GeneratedDataset) -> ValidatedDataset:
    """The great-expectations suite on the staged version; DatasetRejectedError if it fails."""
    report = validate_dataset(Path(generated.staging_dir), config.validation)
    if not report.success:
        raise DatasetRejectedError(report.summary())
    return ValidatedDataset(checks=len(report.checks), data_docs=report.data_docs)


def publish_stage(
    config: PipelineConfig,
    generated: GeneratedDataset,
    validated: ValidatedDataset,
    s3_client: Any | None = None,
) -> PublishedDataset:
    """Move a validated version into place (idempotent) and mirror it to S3 if configured.
    `validated` is the proof that it passed: there is no publishing without one."""
    version = generated.dataset_version
    final = Path(config.data_root) / version
    staging = Path(generated.staging_dir)
    if not final.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(final)
    elif staging.exists():
        shutil.rmtree(staging)
    uri = str(final)
    if config.s3_bucket and s3_client is not None:
        for path in sorted(final.rglob("*")):
            if path.is_file():
                key = f"datasets/{version}/{path.relative_to(final)}"
                s3_client.upload_file(str(path), config.s3_bucket, key)
        uri = f"s3://{config.s3_bucket}/datasets/{version}"
    return PublishedDataset(
        dataset_version=version,
        dataset_dir=str(final),
        uri=uri,
        train=str(final / "train.parquet"),
        test=str(final / "test.parquet"),
        data_docs=str(final / "validation" / "data_docs" / "index.html"),
        validation_page=str(final / "validation" / "index.html"),
    )
