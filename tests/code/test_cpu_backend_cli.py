"""`toolrl train local` is added to the `train` group the job CLI registers."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from training.jobs.local_cli import register_cli


def make_app() -> typer.Typer:
    from training.jobs.cli import register_cli as register_train

    app = typer.Typer()
    register_cli(register_train(app))
    return app


def test_local_command_is_in_the_train_group() -> None:
    result = CliRunner().invoke(make_app(), ["train", "local", "--help"])
    assert result.exit_code == 0
    assert "--spec" in result.output and "--workdir" in result.output


def test_a_bad_spec_exits_2_with_the_field_named(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: x\nmodel: {path: tiny://hermes}\ndata: {train_files: []}\n")
    result = CliRunner().invoke(
        make_app(), ["train", "local", "--spec", str(spec), "--workdir", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "train_files" in result.output


def test_a_missing_data_file_exits_2_naming_it_before_training(tmp_path: Path) -> None:
    """Not a pyarrow traceback minutes in: the path, and how relative paths resolve."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: x\nmodel: {path: tiny://hermes}\n"
        "data: {train_files: [data/train.parquet], test_files: [/nowhere/test.parquet]}\n"
    )
    result = CliRunner().invoke(
        make_app(), ["train", "local", "--spec", str(spec), "--workdir", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert str(tmp_path / "data" / "train.parquet") in result.output
    assert "/nowhere/test.parquet" in result.output
    assert "Traceback" not in result.output
