"""The dataset on disk: train/test parquet and the manifest, and the version of its rows.

Below both writers (the pack generator and the paraphraser), so neither imports the other.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd

from training.data.schema import ROW_COLUMNS


def dataset_version(rows: list[dict[str, Any]]) -> str:
    """The version of a dataset: a hash of its rows' content (same seed, same version)."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode())
    return digest.hexdigest()[:16]


def write_dataset(rows: list[dict[str, Any]], manifest: dict[str, Any], out_dir: Path) -> None:
    """Write train/test parquet and the manifest; the manifest goes last, so a directory with
    a manifest is always complete."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "manifest.json").unlink(missing_ok=True)
    frame = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    is_test = frame["extra_info"].map(lambda info: info["split"] == "test")
    for split, part in (("train", frame[~is_test]), ("test", frame[is_test])):
        tmp = out_dir / f".{split}.parquet.tmp"
        part.reset_index(drop=True).to_parquet(tmp, index=False)
        tmp.replace(out_dir / f"{split}.parquet")
    tmp_manifest = out_dir / ".manifest.json.tmp"
    tmp_manifest.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    tmp_manifest.replace(out_dir / "manifest.json")
