"""The README's `toolrl` examples, run as written from a scratch working directory, with the
relative paths they show (`data/v1`, `sources.yaml`, `training/specs/...`): every path
argument must mean the current directory, in every library it reaches (great-expectations
refused relative ones). Each run asserts on what the command produced, not only its exit.

The examples that run offline in seconds are run; the others (a Ray cluster, a served model,
an MLflow registry, training) are only checked to name real commands. The few changes from
the README's text are listed in `CHANGES` (a smaller --n, a free port, the server's name
for NAME), each applied to the README's own line, and the README must still show each line.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
import yaml
from typer.testing import CliRunner

from serving.runtime.ports import free_port
from training.cli import app
from training.evaluation.report import EvalReport, EvalSource, write_report

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
VENV = Path(sys.executable).parent.parent  # the README's `.venv` (not resolved: it is a venv)

GENERATE = ".venv/bin/toolrl data generate --out data/v1 --n 5000 --seed 0"
VALIDATE = ".venv/bin/toolrl data validate data/v1"
GENERATE_PACK = ".venv/bin/toolrl data generate --pack time --out data/time"
SERVE = ".venv/bin/toolrl mcp serve --mode mock --port 8000"
TOOL_CONFIG = (
    ".venv/bin/toolrl mcp tool-config --url http://127.0.0.1:8000/mcp --out tool_config.yaml"
)
TOOLS_LIST = ".venv/bin/toolrl tools list --sources sources.yaml [--json]"
PACK_INIT = ".venv/bin/toolrl tools pack init --server NAME --sources sources.yaml --out my.yaml"
PACK_VALIDATE = ".venv/bin/toolrl tools pack validate time"
PLAN = ".venv/bin/toolrl train plan --spec training/specs/qwen35_4b_gspo.yaml"
GATE = ".venv/bin/toolrl gate report.json --thresholds training/evaluation/thresholds.yaml"
HELP = ".venv/bin/toolrl --help"
RUN = [GENERATE, VALIDATE, GENERATE_PACK, SERVE, TOOL_CONFIG, TOOLS_LIST, PACK_INIT]
RUN += [PACK_VALIDATE, PLAN, GATE, HELP]

#: What the test changes in a README line before running it, and why.
CHANGES = {
    GENERATE: [("--n 5000", "--n 200")],  # seconds, not a minute; same code path
    SERVE: [("--port 8000", "--port {port}")],  # a free port: 8000 may be taken here
    TOOL_CONFIG: [(":8000/", ":{port}/")],  # the server above
    PACK_INIT: [("NAME", "toolrl")],  # the server's name in sources.yaml
}


def readme_commands() -> list[str]:
    """Every `toolrl` command line in the README's ```bash blocks, without its comment."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S):
        for line in block.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command.startswith((".venv/bin/toolrl", "toolrl")):
                lines.append(command)
    return lines


def argv(example: str, **values: Any) -> list[str]:
    """The README line as this test runs it (`CHANGES` applied)."""
    for old, new in CHANGES.get(example, []):
        example = example.replace(old, new.format(**values))
    return shlex.split(example)


def test_every_example_run_here_is_still_in_the_readme() -> None:
    shown = readme_commands()
    assert [example for example in RUN if example not in shown] == []


def test_every_readme_example_names_a_real_command_and_its_help_answers() -> None:
    """Also the examples not run here: each names a command that exists, and `--help` of
    each command group (and command) on the way there answers."""
    root = typer.main.get_command(app)
    runner = CliRunner()
    checked = set()
    for line in readme_commands():
        words = shlex.split(line)[1:]
        command, path = root, []
        while words and words[0] in getattr(command, "commands", {}):
            command = command.commands[words[0]]  # type: ignore[attr-defined]
            path.append(words.pop(0))
        assert path or words == ["--help"], f"README names no command: {line}"
        for depth in range(len(path) + 1):
            if tuple(path[:depth]) in checked:
                continue
            checked.add(tuple(path[:depth]))
            shown = runner.invoke(app, [*path[:depth], "--help"])
            assert shown.exit_code == 0, (path[:depth], shown.output)
            assert "Usage:" in shown.output
            if depth < len(path):
                assert path[depth] in shown.output, (path[:depth], shown.output)
    assert len(checked) >= 15


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's working directory: `.venv` there is this venv; nothing else of the
    repo is, except the files an example names relative to it (copied)."""
    root = tmp_path_factory.mktemp("readme")
    (root / ".venv").symlink_to(VENV)
    for name in ("training/specs/qwen35_4b_gspo.yaml", "training/evaluation/thresholds.yaml"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    return root


def _env() -> dict[str, str]:
    drop = ("TOOLRL_MCP_TOKEN", "TOOLRL_PIPELINE_CONFIG", "TOOLRL_MCP_URL")
    return {k: v for k, v in os.environ.items() if k not in drop}


def run(workdir: Path, args: list[str], ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=workdir, env=_env(), capture_output=True, text=True, timeout=240, check=False
    )
    if ok:
        assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_help(workdir: Path) -> None:
    shown = run(workdir, argv(HELP)).stdout
    for group in ("data", "train", "tools", "mcp", "eval", "gate", "registry", "demo"):
        assert group in shown


def test_generate_then_validate_a_dataset_in_a_relative_directory(workdir: Path) -> None:
    run(workdir, argv(GENERATE))
    dataset = workdir / "data" / "v1"
    manifest = json.loads((dataset / "manifest.json").read_text(encoding="utf-8"))
    assert 0 < manifest["rows"] <= 200
    for split in ("train.parquet", "test.parquet"):
        assert (dataset / split).stat().st_size > 0

    validated = run(workdir, argv(VALIDATE))  # great-expectations wanted an absolute path
    assert "validation PASSED" in validated.stdout
    report = json.loads((dataset / "validation" / "report.json").read_text(encoding="utf-8"))
    assert report["success"] is True
    assert (dataset / "validation" / "data_docs" / "index.html").is_file()


def test_generate_a_dataset_from_the_time_pack(workdir: Path) -> None:
    run(workdir, argv(GENERATE_PACK))
    dataset = workdir / "data" / "time"
    manifest = json.loads((dataset / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["rows"] > 0 and manifest["pack"]["name"] == "time"
    assert (dataset / manifest["call_store"]["path"]).is_file()
    assert {tool["name"] for tool in json.loads((dataset / "tools.json").read_text())} >= {
        "get_current_time",
        "convert_time",
    }


@pytest.fixture(scope="module")
def mock_server(workdir: Path) -> Iterator[str]:
    """`toolrl mcp serve --mode mock` as the README starts it (on a free port)."""
    port = free_port()
    log = (workdir / "mcp.log").open("wb")
    process = subprocess.Popen(
        argv(SERVE, port=port), cwd=workdir, env=_env(), stdout=log, stderr=log,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                if health.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, (workdir / "mcp.log").read_text()
            assert time.monotonic() < deadline, "the MCP server did not come up"
            time.sleep(0.3)
        assert health.json()["mode"] == "mock"
        (workdir / "sources.yaml").write_text(
            yaml.safe_dump({"servers": {"toolrl": {"url": f"http://127.0.0.1:{port}/mcp"}}})
        )
        yield str(port)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
        log.close()


def test_tool_config_for_verl_is_written_relative(workdir: Path, mock_server: str) -> None:
    run(workdir, argv(TOOL_CONFIG, port=mock_server))
    document = yaml.safe_load((workdir / "tool_config.yaml").read_text(encoding="utf-8"))
    assert len(document["tools"]) == 11
    assert document["tools"][0]["config"]["url"].endswith(f":{mock_server}/mcp")


def test_tools_list_reads_a_relative_sources_file(workdir: Path, mock_server: str) -> None:
    table_example, json_example = (
        TOOLS_LIST.replace(" [--json]", ""),
        TOOLS_LIST.replace("[--json]", "--json"),
    )
    table = run(workdir, argv(table_example)).stdout
    assert "11 tools from 1 MCP server(s)" in table and "get_current_weather" in table
    listed = json.loads(run(workdir, argv(json_example)).stdout)
    assert listed["servers"]["toolrl"]["tools"] == len(listed["tools"]) == 11


def test_pack_init_writes_a_pack_from_the_servers_schemas(workdir: Path, mock_server: str) -> None:
    run(workdir, argv(PACK_INIT))
    pack = yaml.safe_load((workdir / "my.yaml").read_text(encoding="utf-8"))
    assert pack["server"] == "toolrl"
    called = {step["tool"] for intent in pack["intents"] for step in intent.get("steps", [])}
    assert "get_current_weather" in called, sorted(called)


def test_pack_validate_checks_the_shipped_time_pack_against_its_server(workdir: Path) -> None:
    assert "pack OK: pack 'time'" in run(workdir, argv(PACK_VALIDATE)).stdout


def test_train_plan_validates_a_relative_spec_with_verl(workdir: Path) -> None:
    planned = run(workdir, argv(PLAN))
    assert "actor_rollout_ref.model.path=Qwen/Qwen3.5-4B" in planned.stdout
    assert "validated by verl" in planned.stderr


def test_gate_reads_a_relative_report_and_thresholds(workdir: Path) -> None:
    overall = {
        "pass_rate": 0.6,
        "tool_selection_accuracy": 0.9,
        "argument_accuracy": 0.7,
        "irrelevance_accuracy": 0.8,
        "malformed_call_rate": 0.01,
        "error_rate": 0.0,
    }
    source = EvalSource(
        endpoint="http://127.0.0.1:1/v1", model="m", mode="chat", data_path="test.parquet",
        data_sha256="0" * 64, max_turns=8,
    )  # fmt: skip
    report = EvalReport(
        created_at="2026-01-01T00:00:00+00:00",
        source=source,
        cases_total=10,
        metrics={"overall": overall},
    )
    write_report(report, workdir / "report.json")
    # as written (no --training-status) the gate cannot prove the run finished: it rejects
    # for that alone, having read every metric of the report against the thresholds file
    gated = run(workdir, argv(GATE), ok=False)
    assert gated.returncode == 1 and gated.stdout.splitlines()[-1] == "decision: reject"
    failed = [line for line in gated.stdout.splitlines() if line.startswith("FAIL")]
    assert failed == [
        "FAIL  training status: no training status given; cannot prove the run finished"
    ]
    assert "PASS  overall.pass_rate min: 0.6 >= 0.3 required" in gated.stdout

    worse = {"overall": {**overall, "pass_rate": 0.1}}
    write_report(report.model_copy(update={"metrics": worse}), workdir / "report.json")
    assert (
        "FAIL  overall.pass_rate min: 0.1 >= 0.3 required"
        in run(workdir, argv(GATE), ok=False).stdout
    )
