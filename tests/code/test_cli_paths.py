"""Every path argument of the `toolrl` CLI reaches its command absolute, taken from the current
directory (training/cli.py `absolute_path_params`): the sub-packages' groups included,
defaults included, symlinks kept."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from training.cli import _AbsoluteFirst, absolute, app

REPO = Path(__file__).resolve().parents[2]


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


def test_every_parameter_of_every_command_is_made_absolute() -> None:
    commands = _commands(typer.main.get_command(app))
    names = {" ".join(path) for path, _ in commands}
    # the groups that live in the sub-packages are covered too
    assert {
        "data validate",
        "train local",
        "tools pack init",
        "mcp serve",
        "registry register",
    } <= names
    unwrapped = [
        (" ".join(path), param.name)
        for path, command in commands
        for param in command.params
        if not isinstance(param.callback, _AbsoluteFirst)
        and param.name not in ("install_completion", "show_completion")  # typer's, added later
    ]
    assert unwrapped == []


def test_absolute_keeps_symlinks_and_leaves_other_values_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to("/usr/bin/env")
    assert absolute(Path("venv/bin/python")) == tmp_path / "venv" / "bin" / "python"
    assert absolute(Path("a/../b")) == tmp_path / "b"
    assert absolute([Path("x"), Path("/abs")]) == [tmp_path / "x", Path("/abs")]
    assert absolute("data/v1") == "data/v1"  # a str option is not a path to this CLI
    assert absolute(None) is None and absolute(3) == 3


def test_a_relative_option_and_its_default_name_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    given = runner.invoke(app, ["airflow", "status", "--workdir", "deploy"])
    assert f"no Airflow deployment in {tmp_path / 'deploy' / 'airflow'}" in given.output
    default = runner.invoke(app, ["airflow", "status"])  # default: runs/airflow
    assert f"no Airflow deployment in {tmp_path / 'runs' / 'airflow' / 'airflow'}" in default.output


def test_a_submitted_job_gets_an_absolute_workdir_by_default_and_when_relative(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Ray job runs in its own directory: a relative --workdir would land there. The
    request is printed before the Ray address is needed."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("TOOLRL_RAY_ADDRESS", raising=False)
    args = ["train", "submit", "--spec", "training/specs/cpu_smollm2.yaml", "--run-key", "r1"]
    default = CliRunner().invoke(app, [*args, "--backend", "cpu"])
    assert f"--workdir {REPO / 'runs' / 'jobs'}/toolrl-" in default.output
    relative = CliRunner().invoke(app, [*args, "--backend", "cpu", "--workdir", "scratch/jobs"])
    assert f"--workdir {REPO / 'scratch' / 'jobs'}/toolrl-" in relative.output
    assert "None/" not in default.output + relative.output


def test_the_gate_reads_and_writes_relative_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from training.evaluation.report import EvalReport, EvalSource, write_report

    monkeypatch.chdir(tmp_path)
    source = EvalSource(
        endpoint="http://x/v1", model="m", mode="chat", data_path="t.parquet",
        data_sha256="same", max_turns=2,
    )  # fmt: skip
    report = EvalReport(created_at="2026-01-01T00:00:00+00:00", source=source, cases_total=1,
                        metrics={"overall": {"error_rate": 0.0}})  # fmt: skip
    write_report(report, tmp_path / "reports" / "r.json")
    (tmp_path / "t.yaml").write_text("absolute: {overall.error_rate: {max: 1.0}}\n")
    (tmp_path / "status.yaml").write_text("planned_final_step: 2\nfinal_step: 2\n")
    args = ["gate", "reports/r.json", "--thresholds", "t.yaml", "--training-status"]
    done = CliRunner().invoke(app, [*args, "status.yaml", "--out", "out/decision.json"])
    assert done.exit_code == 0, done.output
    assert '"decision": "promote"' in (tmp_path / "out" / "decision.json").read_text()
    assert os.getcwd() == str(tmp_path)


def test_the_demo_hands_absolute_paths_to_the_services_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow's services read the pack from the pipeline config in their own directory: a
    pack file is named absolutely; a shipped pack's name stays a name."""
    import training.ops.demo.run as demo_run

    calls: list[tuple[Path, dict[str, Any]]] = []
    monkeypatch.setattr(
        demo_run, "run_demo", lambda workdir, rows, **kw: calls.append((workdir, kw))
    )
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("pack: mine\n")
    runner = CliRunner()
    assert runner.invoke(app, ["demo", "--pack", "mine.yaml", "--sources", "s.yaml"]).exit_code == 0
    assert runner.invoke(app, ["demo", "--pack", "time"]).exit_code == 0
    assert runner.invoke(app, ["demo", "--workdir", "w"]).exit_code == 0
    assert runner.invoke(app, ["demo"]).exit_code == 0
    assert [(workdir, kw["pack"]) for workdir, kw in calls] == [
        (tmp_path / "runs" / "demo-mine", str(tmp_path / "mine.yaml")),
        (tmp_path / "runs" / "demo-time", "time"),
        (tmp_path / "w", None),
        (tmp_path / "runs" / "demo", None),
    ]
    assert calls[0][1]["pack_sources"] == tmp_path / "s.yaml"
