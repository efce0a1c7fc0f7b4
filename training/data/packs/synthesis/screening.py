"""Gate 3, the suite: the synthetic rows pass the great-expectations suite's row checks one
by one, then the whole dataset with them passes the suite (dataset-level expectations, such
as the category mix, can only be judged there).

Why the suite and not checks of its own: a synthetic row must be exactly as valid as a
template row, by the one definition of valid the dataset stage applies.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from serving.mcp_client.call_store import CallStore
from training.data.check_columns import TRUTH_FLAGS, derive_frame
from training.data.config import ValidationConfig
from training.data.packs.manifest import refresh_manifest
from training.data.packs.synthesis.report import SynthesisReport
from training.data.writer import write_dataset


def screen_rows(
    out_dir: Path, first_synthetic: int, validation: ValidationConfig
) -> dict[int, str]:
    """Gate 3, per row: the suite's row checks (the derived columns the great-expectations
    suite asserts on, computed by `check_columns.derive_frame` from the written dataset) for the
    synthetic rows, `index -> reason` for each that fails one."""
    from training.data.packs.truth import PackTruth
    from training.data.validate import load_split

    manifest = json.loads((out_dir / "manifest.json").read_text(encoding="utf-8"))
    splits = {s: load_split(out_dir / f"{s}.parquet") for s in ("train", "test")}
    truth = PackTruth.open(out_dir, manifest)
    try:
        derived = derive_frame(splits, truth)
    finally:
        truth.close()
    test_shapes = set(derived.loc[derived.file_split == "test", "query_shape"])
    earlier_norms: set[str] = set(derived.loc[derived["index"] < first_synthetic, "query_norm"])
    bad: dict[int, str] = {}
    synthetic = derived[derived["index"] >= first_synthetic].to_dict("records")
    for row in synthetic:
        index, norm = int(row["index"]), str(row["query_norm"])
        failed = [flag for flag in TRUTH_FLAGS if not row[flag]]
        if failed:
            bad[index] = f"suite_{failed[0]}"
        elif norm in earlier_norms:
            bad[index] = "duplicate"
        elif row["query_shape"] in test_shapes:
            bad[index] = "test_overlap"
        elif not 1 <= int(row["prompt_tokens"]) <= validation.max_prompt_tokens:
            bad[index] = "suite_prompt_tokens"
        else:
            earlier_norms.add(norm)
    return bad


def _suite_passes(
    rows: list[dict[str, Any]], manifest: dict[str, Any], out_dir: Path, config: ValidationConfig
) -> bool:
    """The whole great-expectations suite on the dataset with the accepted rows (dataset-level
    expectations, such as the category mix, can only be judged here)."""
    from training.data.validate import validate_dataset

    write_dataset(rows, manifest, out_dir)
    return validate_dataset(out_dir, config).success


def _refreshed(manifest: dict[str, Any], rows: list[dict[str, Any]], path: Path) -> dict[str, Any]:
    with CallStore(path) as store:
        return refresh_manifest(manifest, rows, store)


def screen_synthetic(
    base_rows: list[dict[str, Any]],
    synthetic: list[dict[str, Any]],
    manifest: dict[str, Any],
    out_dir: Path,
    store_path: Path,
    validation: ValidationConfig,
    report: SynthesisReport,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Gate 3 on the rows after `base_rows`: the synthetic rows kept (renumbered after the
    base rows) and the manifest of the dataset with them; each refused row is counted in
    `report`. Leaves the dataset written in `out_dir` as it was screened."""
    write_dataset(base_rows + synthetic, manifest, out_dir)
    bad = screen_rows(out_dir, len(base_rows), validation)
    for index, reason in sorted(bad.items()):
        report.reject(reason, synthetic[index - len(base_rows)]["query"][:120])
    synthetic = [r for r in synthetic if r["extra_info"]["index"] not in bad]
    for position, row in enumerate(synthetic):
        row["extra_info"]["index"] = len(base_rows) + position
    manifest = _refreshed(manifest, base_rows + synthetic, store_path)
    if synthetic and not _suite_passes(base_rows + synthetic, manifest, out_dir, validation):
        for row in synthetic:
            report.reject("suite", row["query"][:120])
        synthetic = []
        manifest = _refreshed(manifest, base_rows, store_path)
    return synthetic, manifest
