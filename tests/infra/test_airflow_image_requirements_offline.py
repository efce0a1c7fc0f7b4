"""The Airflow image's requirement set resolves without torch, verl or vllm.

The Airflow image installs infra/docker/requirements-airflow.txt plus toolrl[orchestration]. If
a dependency there started pulling torch (a few GB of CUDA wheels) into every scheduler and
task pod, nothing else would notice. pip resolves the set without installing anything
(`--dry-run --report`) against the package indexes pip is configured with (local file indexes
on the build machines), in about 15-20 s.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from infra_files import DOCKER_DIR, REPO
from packaging.utils import canonicalize_name

FORBIDDEN = ("torch", "verl", "vllm", "triton", "flash-attn", "transformers")


@pytest.mark.timeout(300)
def test_airflow_image_requirements_resolve_without_torch_offline() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--disable-pip-version-check",
            "--report",
            "-",
            "-r",
            str(DOCKER_DIR / "requirements-airflow.txt"),
            f"{REPO}[orchestration]",
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    resolved: dict[str, str] = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in report["install"]
    }
    assert resolved.get("apache-airflow") == "3.3.2"
    assert "toolrl" in resolved
    assert "mlflow" in resolved
    heavy = sorted(
        name
        for name in resolved
        if name.startswith(FORBIDDEN) or name.startswith("nvidia-") or name == "torch"
    )
    assert not heavy, f"the Airflow image would pull GPU/training packages: {heavy}"
