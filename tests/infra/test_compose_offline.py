"""infra/compose/compose.yaml, checked without a container engine.

`compose-spec` (the Rust compose_spec parser) validates the file against the Compose
Specification: unknown keys, bad durations and bad depends_on conditions fail it. The other
checks are the stack's own rules: every service is buildable or pullable, long-running services
have health checks, one-shot jobs are awaited, secrets come from .env, GPUs are reserved.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from compose_spec import PyCompose
from infra_files import COMPOSE_FILE, REPO

COMPOSE_DIR = COMPOSE_FILE.parent
INTERPOLATION = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::?[-?][^}]*)?\}")


def _validate(doc: dict[str, Any]) -> None:
    PyCompose.from_json(json.dumps(doc))


def _strings(node: Any) -> list[str]:
    """Every string value in a parsed YAML tree (comments are gone by then)."""
    if isinstance(node, dict):
        return [t for key, value in node.items() for t in (*_strings(key), *_strings(value))]
    if isinstance(node, list):
        return [t for item in node for t in _strings(item)]
    return [node] if isinstance(node, str) else []


def _is_one_shot(service: dict[str, Any]) -> bool:
    return str(service.get("labels", {}).get("toolrl.one-shot", "")).lower() == "true"


def test_compose_file_validates_against_the_compose_spec_offline(compose: dict[str, Any]) -> None:
    _validate(compose)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["services"]["vllm"].update(helthcheck={}),
        lambda d: d["services"]["vllm"]["depends_on"]["mlflow"].update(condition="healthy"),
        lambda d: d["services"]["mlflow"]["healthcheck"].update(interval="10 parsecs"),
    ],
    ids=["typo-key", "bad-condition", "bad-duration"],
)
def test_compose_validator_rejects_broken_files_offline(
    compose: dict[str, Any], mutate: Any
) -> None:
    """The validator is only worth running if it catches these mistakes."""
    broken = copy.deepcopy(compose)
    mutate(broken)
    with pytest.raises(ValueError):
        _validate(broken)


def test_every_compose_service_has_an_image_and_a_buildable_context_offline(
    compose: dict[str, Any],
) -> None:
    for name, service in compose["services"].items():
        assert "image" in service, f"{name}: no image"
        assert ":" in service["image"], f"{name}: image without a tag"
        assert not service["image"].endswith(":latest"), f"{name}: floating tag"
        build = service.get("build")
        if build is not None:
            context = (COMPOSE_DIR / build["context"]).resolve()
            assert context == REPO, f"{name}: build context must be the repository root"
            assert (context / build["dockerfile"]).is_file(), f"{name}: missing Dockerfile"


def test_every_long_running_compose_service_has_a_health_check_offline(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name, service in services.items():
        if _is_one_shot(service):
            assert service.get("restart") == "no", f"{name}: one-shot jobs must not restart"
            awaited = [
                other
                for other in services.values()
                if service_dep(other, name) == "service_completed_successfully"
            ]
            assert awaited, f"{name}: one-shot job that nothing waits for"
            continue
        check = service.get("healthcheck")
        assert check, f"{name}: no health check"
        assert check.get("test"), f"{name}: health check without a test"
        assert not check.get("disable"), name


def service_dep(service: dict[str, Any], target: str) -> str | None:
    """The depends_on condition `service` has on `target`, if any."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return "service_started" if target in deps else None
    entry = deps.get(target)
    return None if entry is None else str(entry.get("condition", "service_started"))


def test_compose_dependencies_exist_and_wait_for_health_offline(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        for target in service.get("depends_on") or {}:
            assert target in services, f"{name} depends on unknown {target}"
            condition = service_dep(service, target)
            if not _is_one_shot(services[target]):
                assert condition == "service_healthy", f"{name} -> {target}: wait for health"


def test_compose_uses_named_volumes_only_offline(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes", {}))
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source, _, rest = volume.partition(":")
            if source.startswith((".", "/")):
                # the only host files allowed: read-only init scripts kept next to compose.yaml
                assert rest.endswith(":ro"), f"{name}: bind mount {volume} must be read-only"
                assert (COMPOSE_DIR / source).is_file(), f"{name}: {source} missing"
            else:
                assert source in declared, f"{name}: volume {source} not declared"


def test_compose_secrets_come_from_env_file_and_are_documented_offline(
    compose: dict[str, Any],
) -> None:
    """Every ${VAR} compose interpolates is listed in env.example, and no secret has a literal
    value in the file (a password, key or token must be an interpolation)."""
    used = {name for text in _strings(compose) for name in INTERPOLATION.findall(text)}
    documented = {
        line.split("=", 1)[0]
        for line in (COMPOSE_DIR / "env.example").read_text(encoding="utf-8").splitlines()
        if "=" in line and not line.startswith("#")
    }
    assert used <= documented, f"undocumented in env.example: {sorted(used - documented)}"
    secretish = re.compile(r"(PASSWORD|SECRET|TOKEN|API_KEY|FERNET)")
    for name, service in compose["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if secretish.search(key):
                assert "${" in str(value), f"{name}: {key} has a literal value"


def test_gpu_services_reserve_nvidia_devices_offline(compose: dict[str, Any]) -> None:
    for name in ("ray-gpu-worker", "vllm"):
        devices = compose["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices), name
    assert compose["services"]["vllm"].get("profiles") == ["serving"]


def test_cpu_serving_profile_serves_the_champion_on_the_cpu_engine_offline(
    compose: dict[str, Any],
) -> None:
    """Without a GPU, the `serving-cpu` profile serves the same endpoint: the CPU engine on the
    CPU training image (no NVIDIA reservation), the champion alias, the front door's key."""
    service = compose["services"]["serving-cpu"]
    assert service.get("profiles") == ["serving-cpu"]
    assert "deploy" not in service, "no GPU reservation on the CPU variant"
    assert service["build"]["dockerfile"] == "infra/docker/training-cpu.Dockerfile"
    command = service["command"]
    assert command[:2] == ["toolrl", "serve"]
    assert command[command.index("--backend") + 1] == "cpu"
    assert command[command.index("--model-uri") + 1].endswith("@champion")
    cache = command[command.index("--cache-dir") + 1]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}
    assert any(cache.startswith(target) for target in mounts), "downloads land on a volume"
    assert "toolrl-runs" not in mounts.values(), "serving never sees the training runs"
    assert service["ports"] == compose["services"]["vllm"]["ports"], "the same endpoint"
