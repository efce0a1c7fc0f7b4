"""The dataset stage through the real `toolrl` CLI, as a user and the DAG run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

TOOLRL = [sys.executable, "-m", "training.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TOOLRL, *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_generate_then_validate_through_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    generated = run("data", "generate", "--out", str(out), "--n", "300", "--seed", "5", "--quiet")
    assert generated.returncode == 0, generated.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert f"dataset {manifest['dataset_version']}: 300 rows" in generated.stdout
    assert "next: toolrl data validate" in generated.stdout

    validated = run("data", "validate", str(out))
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert "validation PASSED" in validated.stdout
    assert (out / "validation" / "data_docs" / "index.html").is_file()


def test_validate_exits_nonzero_with_a_readable_summary_on_bad_data(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    assert run("data", "generate", "--out", str(out), "--n", "200", "--quiet").returncode == 0
    frame = pd.read_parquet(out / "train.parquet")
    pd.concat([frame, frame.head(3)]).to_parquet(out / "train.parquet", index=False)

    validated = run("data", "validate", str(out), "--skip-verl")
    assert validated.returncode == 1
    assert "validation FAILED" in validated.stdout
    assert "expect_column_values_to_be_unique(query): 6 unexpected value(s)" in validated.stdout
    assert "must not be used for training" in validated.stderr


def test_cli_rejects_bad_arguments_clearly(tmp_path: Path) -> None:
    bad_n = run("data", "generate", "--out", str(tmp_path / "x"), "--n", "3")
    assert bad_n.returncode == 2
    assert "greater than or equal to 10" in bad_n.stderr
    missing = run("data", "validate", str(tmp_path / "nowhere"))
    assert missing.returncode == 2
    assert "is not a directory" in missing.stderr


def test_help_reads_well() -> None:
    result = run("--help")
    assert result.returncode == 0
    for command in ("data", "demo"):
        assert command in result.stdout
