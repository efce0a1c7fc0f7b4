"""Validate a dataset version with great-expectations; bad data stops the pipeline.

Row-level facts that need project code (the ground truth re-computes by executing the real
tools, arguments pass the catalog's validator, no train/test overlap, ...) are computed into
check columns first; great-expectations then asserts on those columns and on the raw ones,
so every check appears in one suite, one result and one Data Docs report.

The results are also written as `validation/index.html` (`validation_page.py`), the page to
open: great-expectations' Data Docs need the network for their scripts, this page does not.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from serving.tools import ToolContext, ToolError, get_catalog
from training.data.config import GenerationConfig, ValidationConfig
from training.data.queries import normalise_query, query_shape
from training.data.schema import (
    ROW_COLUMNS,
    Category,
    GroundTruth,
)
from training.data.tokens import prompt_tokens
from training.data.validation_page import page_path, write_validation_page

if TYPE_CHECKING:
    from training.data.packs.truth import PackTruth

SPLITS = ("train", "test")
SUITE_NAME = "toolrl_dataset"


class DatasetFileError(ValueError):
    """A dataset file is missing, empty, truncated or not the expected schema."""


@dataclass
class CheckResult:
    name: str
    success: bool
    detail: str = ""
    examples: list[str] = field(default_factory=list)
    # For great-expectations checks, the result as it came (the validation page shows it):
    suite: str | None = None
    expectation: str | None = None
    column: str | None = None
    observed: Any = None
    unexpected_count: int | None = None


@dataclass
class ValidationReport:
    dataset_dir: str
    success: bool
    rows: int
    dataset_version: str | None
    checks: list[CheckResult]
    data_docs: str | None = None
    """great-expectations' Data Docs index; it loads its scripts from CDNs (blank offline)."""
    page: str | None = None
    """The self-contained validation page (`validation/index.html`): the one to open."""

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.success]

    def summary(self) -> str:
        status = "PASSED" if self.success else "FAILED"
        lines = [
            f"Dataset {self.dataset_dir} ({self.rows} rows): validation {status}, "
            f"{len(self.checks) - len(self.failed)}/{len(self.checks)} checks passed"
        ]
        for check in self.failed:
            lines.append(f"  x {check.name}: {check.detail}")
            lines.extend(f"      e.g. {example}" for example in check.examples[:3])
        if self.page:
            lines.append(f"Validation page: {self.page}")
        if self.data_docs:
            lines.append(f"Data Docs: {self.data_docs} (needs the network for its scripts)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset_dir": self.dataset_dir,
            "success": self.success,
            "rows": self.rows,
            "dataset_version": self.dataset_version,
            "data_docs": self.data_docs,
            "page": self.page,
            "checks": [c.__dict__ for c in self.checks],
        }


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


# ---- derived check columns ----------------------------------------------------------------
def _first_problem(checks: list[Callable[[], str | None]]) -> str | None:
    for check in checks:
        problem = check()
        if problem:
            return problem
    return None


def check_row_truth(row: dict[str, Any]) -> dict[str, Any]:
    """Parse a row's ground truth and re-execute its calls; return one flag per property."""
    flags: dict[str, Any] = {
        "gt_parses": False,
        "tools_known": False,
        "args_valid": False,
        "gt_recomputes": False,
        "calls_consistent": False,
        "problem": None,
    }
    try:
        truth = GroundTruth.from_json(row["reward_model"]["ground_truth"])
    except (ValueError, TypeError, KeyError) as exc:
        flags["problem"] = f"ground truth does not parse: {str(exc)[:120]}"
        return flags
    flags["gt_parses"] = True
    catalog = get_catalog()
    unknown = [c.name for c in truth.expected_calls if c.name not in catalog]
    flags["tools_known"] = not unknown
    if unknown:
        flags["problem"] = f"unknown tool(s): {', '.join(unknown)}"
        return flags
    invalid: list[str] = []
    for c in truth.expected_calls:
        try:
            catalog.validate(c.name, c.arguments)
        except ToolError as exc:
            invalid.append(str(exc))
    flags["args_valid"] = not invalid
    if invalid:
        flags["problem"] = invalid[0][:200]
        return flags
    try:
        expected_calls = json.loads(row["expected_calls"])
    except (TypeError, ValueError):
        expected_calls = None
    flags["calls_consistent"] = expected_calls == [
        [c.model_dump() for c in step] for step in truth.steps
    ]
    context = ToolContext.reference(session_id=f"validate-{row['extra_index']}")
    try:
        results = [
            [catalog.execute(c.name, c.arguments, context, mode="mock") for c in step]
            for step in truth.steps
        ]
    except ToolError as exc:
        flags["problem"] = f"expected call fails when executed: {str(exc)[:160]}"
        return flags
    blob = json.dumps(results, ensure_ascii=False)
    missing = [a for a in truth.answers if a not in blob]
    flags["gt_recomputes"] = results == truth.results and not missing
    if results != truth.results:
        flags["problem"] = "re-executing the expected calls gives different results"
    elif missing:
        flags["problem"] = f"answer(s) not produced by the tools: {missing[:3]}"
    elif not flags["calls_consistent"]:
        flags["problem"] = "expected_calls column disagrees with the ground truth"
    return flags


def derive_frame(
    splits: dict[str, pd.DataFrame], pack_truth: PackTruth | None = None
) -> pd.DataFrame:
    """One flat frame (both splits) with the raw columns and the computed check columns.
    `pack_truth`: a pack dataset's rows are checked against its own tool snapshot and call
    store (`training.data.packs.truth`) instead of the project's catalog."""
    check_row = pack_truth.check_row if pack_truth is not None else check_row_truth
    schemas = pack_truth.openai_schemas() if pack_truth is not None else None
    parts = []
    for split, frame in splits.items():
        part = pd.DataFrame(
            {
                "file_split": split,
                "split": frame["extra_split"],
                "index": frame["extra_index"],
                "data_source": frame["data_source"],
                "agent_name": frame["agent_name"],
                "query": frame["query"],
                "category": frame["category"],
                "difficulty": frame["difficulty"],
                "language": frame["language"],
                "template_id": frame["template_id"],
                "num_steps": frame["num_steps"],
                "prompt_roles": frame["prompt"].map(lambda p: ",".join(m["role"] for m in p)),
                "user_matches_query": [
                    p[-1]["content"] == q
                    for p, q in zip(frame["prompt"], frame["query"], strict=True)
                ],
                "tools_used": frame["tools_used"].map(lambda t: list(t) if t is not None else []),
            }
        )
        part["prompt_tokens"] = prompt_tokens([list(p) for p in frame["prompt"]], schemas)
        flags = [check_row({str(k): v for k, v in row.items()}) for row in frame.to_dict("records")]
        part = pd.concat([part, pd.DataFrame(flags, index=part.index)], axis=1)
        parts.append(part)
    derived = pd.concat(parts, ignore_index=True)
    derived["split_consistent"] = derived["split"] == derived["file_split"]
    derived["query_norm"] = derived["query"].map(normalise_query)
    derived["query_shape"] = derived["query"].map(query_shape)
    derived["template_split"] = derived["template_id"].astype(str) + "|" + derived["file_split"]
    for column, name in (
        ("query_norm", "overlap_exact"),
        ("query_shape", "overlap_shape"),
        ("template_id", "overlap_template"),
    ):
        train_values = set(derived.loc[derived.file_split == "train", column])
        derived[name] = (derived.file_split == "test") & derived[column].isin(train_values)
    return derived


def coverage_frame(
    derived: pd.DataFrame,
    generation: GenerationConfig | None,
    tool_names: list[str] | None = None,
) -> pd.DataFrame:
    """One row per category (share vs target) and per tool (row count), for bounds checks.
    `tool_names`: the tools that must be covered (default: the project's catalog)."""
    total = max(len(derived), 1)
    mix = generation.category_mix if generation else {}
    rows = []
    for category in Category:
        share = float((derived["category"] == category.value).sum()) / total
        target = float(mix.get(category, share))
        rows.append(
            {
                "kind": "category",
                "key": category.value,
                "count": int(share * total),
                "deviation": abs(share - target),
            }
        )
    tool_counts = derived["tools_used"].explode().value_counts()
    for name in get_catalog().names if tool_names is None else tool_names:
        rows.append(
            {"kind": "tool", "key": name, "count": int(tool_counts.get(name, 0)), "deviation": 0.0}
        )
    return pd.DataFrame(rows)


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


def validate_dataset(dataset_dir: Path, config: ValidationConfig | None = None) -> ValidationReport:
    """Validate DIR/{train,test}.parquet; never raises on bad data, reports it instead."""
    from training.data.expectations import run_suites

    config = config or ValidationConfig()
    dataset_dir = Path(dataset_dir)
    manifest = _read_manifest(dataset_dir)
    version = manifest.get("dataset_version") if manifest else None
    checks: list[CheckResult] = []
    splits: dict[str, pd.DataFrame] = {}
    for split in SPLITS:
        try:
            splits[split] = load_split(dataset_dir / f"{split}.parquet")
        except DatasetFileError as exc:
            checks.append(CheckResult(f"{split}_file_readable", False, str(exc)))
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

    generation = None
    if manifest and isinstance(manifest.get("generator"), dict):
        try:
            settings = {k: v for k, v in manifest["generator"].items() if k != "kind"}
            generation = GenerationConfig.model_validate(settings)
        except ValueError:
            checks.append(
                CheckResult(
                    "manifest_generator_valid",
                    False,
                    "manifest.generator does not parse as GenerationConfig",
                )
            )
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
    problems = derived.loc[derived["problem"].notna(), ["index", "problem"]]
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
    row_count = len(derived)
    if manifest and manifest.get("rows") not in (None, row_count):
        checks.append(
            CheckResult(
                "manifest_row_count",
                False,
                f"manifest says {manifest.get('rows')} rows, files hold {row_count}",
            )
        )
    # the frames are done with: release them before verl (torch, transformers) is imported,
    # so peak memory is the larger of the two phases, not their sum
    del derived, coverage, splits, problems
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


MUST_BE_TRUE_COLUMNS = {
    "gt_parses",
    "tools_known",
    "args_valid",
    "gt_recomputes",
    "calls_consistent",
}
