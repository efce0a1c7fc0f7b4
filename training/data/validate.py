"""Validate a dataset version with great-expectations; bad data stops the pipeline.

Row-level facts that need project code are computed into check columns first
(`check_columns`); great-expectations then asserts on those columns and on the raw ones, so
every check appears in one suite, one result and one Data Docs report.

The results are also written as `validation/index.html` (`validation_page.py`), the page to
open: great-expectations' Data Docs need the network for their scripts, this page does not.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from training.data.check_columns import MUST_BE_TRUE_COLUMNS, coverage_frame, derive_frame
from training.data.config import GenerationConfig, ValidationConfig
from training.data.schema import ROW_COLUMNS
from training.data.validation_page import page_path, write_validation_page
from training.data.validation_report import CheckResult, ValidationReport

if TYPE_CHECKING:
    from training.data.packs.truth import PackTruth

SPLITS = ("train", "test")
SUITE_NAME = "toolrl_dataset"


class DatasetFileError(ValueError):
    """A dataset file is missing, empty, truncated or not the expected schema."""


# ---- loading ------------------------------------------------------------------------------
def load_split(path: Path) -> pd.DataFrame:
    """Read one split, turning every way a file can be broken into a DatasetFileError."""
    if not path.exists():
        raise DatasetFileError(f"{path.name} is missing from {path.parent}")
    if path.stat().st_size == 0:
        raise DatasetFileError(f"{path.name} is empty (0 bytes)")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise DatasetFileError(
            f"{path.name} is not a readable parquet file (truncated or corrupt?): {exc}"
        ) from exc
    missing = [c for c in ROW_COLUMNS if c not in table.column_names]
    if missing:
        raise DatasetFileError(f"{path.name} lacks required columns: {', '.join(missing)}")
    # Only extra_info's index and split are checked here (verl's own loader checks the rest):
    # pulling them out in Arrow keeps 100k rows x 11 tools_kwargs dicts out of Python memory.
    extra = table.column("extra_info")
    if not pa.types.is_struct(extra.type):
        raise DatasetFileError(f"{path.name}: extra_info must be a struct, got {extra.type}")
    fields = {extra.type.field(i).name for i in range(extra.type.num_fields)}
    if not {"index", "split"} <= fields:
        raise DatasetFileError(f"{path.name}: extra_info lacks index and/or split")
    table = (
        table.drop_columns(["extra_info"])
        .append_column("extra_index", pc.struct_field(extra, "index"))
        .append_column("extra_split", pc.struct_field(extra, "split"))
    )
    frame: pd.DataFrame = table.to_pandas()
    return frame


# ---- orchestration -------------------------------------------------------------------------
def _read_manifest(dataset_dir: Path) -> dict[str, Any] | None:
    path = dataset_dir / "manifest.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data
    except (OSError, ValueError):
        return None


def verl_dataset_check(train_path: Path) -> CheckResult:
    """Load the split with verl's own RLHFDataset, as the trainer will (training extra only)."""
    from training.data.verl_check import load_with_verl

    try:
        count = load_with_verl(train_path)
    except ImportError as exc:
        return CheckResult("verl_rlhf_dataset_loads", True, f"skipped: verl not installed ({exc})")
    except Exception as exc:  # verl raises many types; any of them means "verl cannot read it"
        return CheckResult(
            "verl_rlhf_dataset_loads",
            False,
            f"verl's RLHFDataset failed: {type(exc).__name__}: {str(exc)[:300]}",
        )
    return CheckResult("verl_rlhf_dataset_loads", True, f"verl loaded {count} rows")


def _load_splits(dataset_dir: Path) -> tuple[dict[str, pd.DataFrame], list[CheckResult]]:
    """The readable splits, and a failed check for each that is not."""
    splits: dict[str, pd.DataFrame] = {}
    checks: list[CheckResult] = []
    for split in SPLITS:
        try:
            splits[split] = load_split(dataset_dir / f"{split}.parquet")
        except DatasetFileError as exc:
            checks.append(CheckResult(f"{split}_file_readable", False, str(exc)))
    return splits, checks


def _generation_config(
    manifest: dict[str, Any] | None,
) -> tuple[GenerationConfig | None, list[CheckResult]]:
    """The generator settings the manifest records (the category mix is judged against
    them); a failed check when they do not parse."""
    if not manifest or not isinstance(manifest.get("generator"), dict):
        return None, []
    try:
        settings = {k: v for k, v in manifest["generator"].items() if k != "kind"}
        return GenerationConfig.model_validate(settings), []
    except ValueError:
        return None, [
            CheckResult(
                "manifest_generator_valid",
                False,
                "manifest.generator does not parse as GenerationConfig",
            )
        ]


def _suite_checks(results: list[dict[str, Any]], derived: pd.DataFrame) -> list[CheckResult]:
    """great-expectations' results as checks; a failed truth flag shows the rows' problems as
    its examples (the suite itself only counts them)."""
    problems = derived.loc[derived["problem"].notna(), ["index", "problem"]]
    checks = []
    for result in results:
        name = f"{result['expectation']}({result['column'] or result['suite']})"
        detail = ""
        examples = result["examples"]
        if not result["success"]:
            detail = (
                f"{result['unexpected_count']} unexpected value(s)"
                if result["unexpected_count"] is not None
                else f"observed {result['observed']}"
            )
            if result["column"] in MUST_BE_TRUE_COLUMNS and not problems.empty:
                examples = [f"row {r.index}: {r.problem}" for r in problems.head(3).itertuples()]
        checks.append(
            CheckResult(
                name,
                result["success"],
                detail,
                examples,
                suite=result["suite"],
                expectation=result["expectation"],
                column=result["column"],
                observed=result["observed"],
                unexpected_count=result["unexpected_count"],
            )
        )
    return checks


def _row_count_checks(manifest: dict[str, Any] | None, row_count: int) -> list[CheckResult]:
    """A failed check when the manifest names another row count than the files hold."""
    if manifest and manifest.get("rows") not in (None, row_count):
        return [
            CheckResult(
                "manifest_row_count",
                False,
                f"manifest says {manifest.get('rows')} rows, files hold {row_count}",
            )
        ]
    return []


def _run_suites(
    dataset_dir: Path,
    splits: dict[str, pd.DataFrame],
    manifest: dict[str, Any] | None,
    config: ValidationConfig,
) -> tuple[list[CheckResult], int, str | None]:
    """The check columns, then the great-expectations suites on them: the checks, the row
    count and the Data Docs index. A pack dataset is judged by its own truth source."""
    from training.data.expectations import run_suites

    generation, checks = _generation_config(manifest)
    pack_truth, pack_checks = _open_pack_truth(dataset_dir, manifest)
    checks += pack_checks
    if pack_truth is not None:
        config = config.model_copy(update={"languages": pack_truth.languages})
    try:
        derived = derive_frame(splits, pack_truth)
    finally:
        if pack_truth is not None:
            pack_truth.close()
    pack_tools = (
        sorted(manifest.get("tools") or {}) if pack_truth is not None and manifest else None
    )
    coverage = coverage_frame(derived, generation, pack_tools)
    results, docs = run_suites(derived, coverage, config, dataset_dir / "validation")
    checks += _suite_checks(results, derived)
    return checks, len(derived), docs


def validate_dataset(dataset_dir: Path, config: ValidationConfig | None = None) -> ValidationReport:
    """Validate DIR/{train,test}.parquet; never raises on bad data, reports it instead."""
    config = config or ValidationConfig()
    dataset_dir = Path(dataset_dir)
    manifest = _read_manifest(dataset_dir)
    version = manifest.get("dataset_version") if manifest else None
    splits, checks = _load_splits(dataset_dir)
    checks.append(
        CheckResult(
            "manifest_present",
            manifest is not None,
            "" if manifest else "manifest.json missing or not JSON",
        )
    )
    if len(splits) < len(SPLITS):
        report = ValidationReport(str(dataset_dir), False, 0, version, checks)
        _write_page(report, dataset_dir)
        return report
    suite_checks, row_count, docs = _run_suites(dataset_dir, splits, manifest, config)
    checks += suite_checks
    checks += _row_count_checks(manifest, row_count)
    # the frames are done with: release them before verl (torch, transformers) is imported,
    # so peak memory is the larger of the two phases, not their sum
    del splits
    gc.collect()
    if config.check_verl_dataset:
        checks.append(verl_dataset_check(dataset_dir / "train.parquet"))
    report = ValidationReport(
        str(dataset_dir), all(c.success for c in checks), row_count, version, checks, docs
    )
    report.page = str(page_path(dataset_dir))  # report.json names it; written just below
    (dataset_dir / "validation").mkdir(exist_ok=True)
    (dataset_dir / "validation" / "report.json").write_text(
        json.dumps(report.to_dict(), indent=2, ensure_ascii=False, default=str) + "\n"
    )
    _write_page(report, dataset_dir)
    return report


def _open_pack_truth(
    dataset_dir: Path, manifest: dict[str, Any] | None
) -> tuple[PackTruth | None, list[CheckResult]]:
    """For a dataset generated from a task pack: its truth source and the call-store checks
    (the store is there, and its digest is the one the manifest names)."""
    generator = (manifest or {}).get("generator")
    if not manifest or not isinstance(generator, dict) or generator.get("kind") != "pack":
        return None, []
    from training.data.packs.truth import PackTruth, PackTruthError

    try:
        truth = PackTruth.open(dataset_dir, manifest)
    except PackTruthError as exc:
        return None, [CheckResult("pack_call_store_readable", False, str(exc))]
    digest = truth.store.digest()
    same = digest == truth.digest
    detail = "" if same else f"store digest {digest[:16]} != manifest {str(truth.digest)[:16]}"
    return truth, [CheckResult("pack_call_store_digest", same, detail)]


def _write_page(report: ValidationReport, dataset_dir: Path) -> None:
    """Write the self-contained page on every path out of `validate_dataset`, so a rejected
    dataset (the one people need to read about) always has one."""
    report.page = str(write_validation_page(report.to_dict(), dataset_dir / "validation"))
