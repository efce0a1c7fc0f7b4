"""The layers hold: `lint-imports` with the contracts in pyproject.toml (docs/ARCHITECTURE.md,
"Layers"), run here too so `pytest` alone enforces them, not only `make lint`.

The second test breaks each rule once in a copy of the packages, so a contract that silently
stopped checking (a renamed package, a dropped id) fails here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
CONTRACT_IDS = {"direction", "no-airflow", "training-layers", "serving-layers", "acyclic"}


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(REPO / "pyproject.toml")],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_import_contracts_are_kept() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert {contract["id"] for contract in config["contracts"]} == CONTRACT_IDS
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"Contracts: {len(CONTRACT_IDS)} kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "source", "broken"),
    [
        ("serving/_probe.py", "import training.spec\n", "serving never imports training"),
        ("training/_probe.py", "import airflow.sdk\n", "imports neither Airflow"),
        ("serving/_probe.py", "import toolrl_plugins.hooks\n", "imports neither Airflow"),
        ("training/data/_probe.py", "import training.ops.demo\n", "training: entry points"),
        ("serving/tools/_probe.py", "import serving.agent\n", "serving: entry point"),
        ("serving/runtime/_probe.py", "import serving.runtime.ports\n", None),
    ],
)
def test_each_contract_catches_its_violation(
    tmp_path: Path, module: str, source: str, broken: str | None
) -> None:
    for package in ("training", "serving"):
        shutil.copytree(
            REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    (tmp_path / module).write_text(source)
    result = lint_imports(tmp_path)
    if broken is None:  # the control: an import inside one package's own layer
        assert result.returncode == 0, result.stdout[-4000:]
        return
    assert result.returncode != 0, result.stdout[-4000:]
    assert broken in result.stdout.split("Broken contracts")[-1]


def test_a_cycle_between_siblings_is_caught(tmp_path: Path) -> None:
    for package in ("training", "serving"):
        shutil.copytree(
            REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    # two modules of one package: no layers contract speaks about them, the acyclic one must
    (tmp_path / "serving/runtime/_a.py").write_text("import serving.runtime._b\n")
    (tmp_path / "serving/runtime/_b.py").write_text("import serving.runtime._a\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout[-4000:]
    assert "No cycles are allowed in serving.runtime." in result.stdout
