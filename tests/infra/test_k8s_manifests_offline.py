"""infra/k8s, checked without a cluster.

Core objects validate against the Kubernetes OpenAPI schemas that `kubernetes-validate` ships
(strict mode: unknown fields fail, as `kubectl apply --validate=strict` would). The KubeRay
RayCluster is a custom resource whose schema that package lacks, so its pod templates are
validated as core PodTemplates and its own fields against a strict model of KubeRay's v1 API;
KubeRay's own CRD schema (v1.4.2, shipped in tests/infra/fixtures; KUBERAY_CRD=<path> checks
another version) is used too.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import os
import re
from pathlib import Path
from typing import Any, Literal

import jsonschema
import kubernetes_validate
import pytest
import yaml
from infra_files import DOCKER_DIR
from pydantic import BaseModel, ConfigDict, Field

# The oldest Kubernetes minor the manifests claim to support, and the newest the validator has.
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
CUSTOM_KINDS = {"RayCluster"}


def _core(docs: list[tuple[Path, dict[str, Any]]]) -> list[tuple[Path, dict[str, Any]]]:
    return [(path, doc) for path, doc in docs if doc["kind"] not in CUSTOM_KINDS]


def _raycluster(docs: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    (cluster,) = [doc for _, doc in docs if doc["kind"] == "RayCluster"]
    return cluster


def _pod_templates(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod template an object carries (Deployments, RayCluster groups)."""
    spec = doc.get("spec", {})
    if doc["kind"] == "RayCluster":
        groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
        return [group["template"] for group in groups]
    return [spec["template"]] if "template" in spec else []


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_manifests_validate_against_schemas_offline(
    k8s_documents: list[tuple[Path, dict[str, Any]]], version: str
) -> None:
    for path, doc in _core(k8s_documents):
        kubernetes_validate.validate(doc, version, strict=True)
        assert doc["metadata"].get("namespace", "toolrl") == "toolrl", path.name


def test_k8s_schema_validation_rejects_a_typo_offline(
    k8s_documents: list[tuple[Path, dict[str, Any]]],
) -> None:
    """The validator is only worth running if it catches a misspelt probe field."""
    broken = copy.deepcopy(_by_kind(k8s_documents, "Deployment")["toolrl-serving"])
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbe"]["httpGet"]["pth"] = container["readinessProbe"]["httpGet"].pop(
        "path"
    )
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


def test_raycluster_pod_templates_validate_as_core_pod_templates_offline(
    k8s_documents: list[tuple[Path, dict[str, Any]]],
) -> None:
    cluster = _raycluster(k8s_documents)
    for template in _pod_templates(cluster):
        pod_template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "probe", "namespace": "toolrl"},
            "template": template,
        }
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(pod_template, version, strict=True)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Group(_Strict):
    rayStartParams: dict[str, str]  # noqa: N815 - KubeRay's field names
    template: dict[str, Any]


class _HeadGroup(_Group):
    serviceType: Literal["ClusterIP", "NodePort", "LoadBalancer"] | None = None  # noqa: N815


class _WorkerGroup(_Group):
    groupName: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # noqa: N815
    replicas: int = Field(ge=0)
    minReplicas: int = Field(ge=0)  # noqa: N815
    maxReplicas: int = Field(ge=1)  # noqa: N815


class _AutoscalerOptions(_Strict):
    upscalingMode: Literal["Default", "Aggressive", "Conservative"]  # noqa: N815
    idleTimeoutSeconds: int = Field(ge=0)  # noqa: N815
    resources: dict[str, Any]
    env: list[dict[str, Any]] = Field(default_factory=list)  # the sidecar's env (token auth)


class _RayClusterSpec(_Strict):
    """The subset of KubeRay's ray.io/v1 RayClusterSpec these manifests use; an unknown or
    misspelt field fails here as it would against the CRD."""

    rayVersion: str  # noqa: N815
    enableInTreeAutoscaling: bool  # noqa: N815
    autoscalerOptions: _AutoscalerOptions  # noqa: N815
    headGroupSpec: _HeadGroup  # noqa: N815
    workerGroupSpecs: list[_WorkerGroup]  # noqa: N815


def test_raycluster_spec_matches_kuberay_v1_and_the_training_image_offline(
    k8s_documents: list[tuple[Path, dict[str, Any]]],
) -> None:
    cluster = _raycluster(k8s_documents)
    assert cluster["apiVersion"] == "ray.io/v1"
    spec = _RayClusterSpec.model_validate(cluster["spec"])
    for group in spec.workerGroupSpecs:
        assert group.minReplicas <= group.replicas <= group.maxReplicas, group.groupName
        limits = group.template["spec"]["containers"][0]["resources"]["limits"]
        assert int(limits["nvidia.com/gpu"]) >= 1, f"{group.groupName}: a GPU group without GPUs"
    assert spec.headGroupSpec.rayStartParams.get("num-gpus") == "0"
    constraints = (DOCKER_DIR / "constraints-gpu.txt").read_text(encoding="utf-8")
    pinned = re.search(r"^ray==(\S+)$", constraints, re.MULTILINE)
    assert pinned, "constraints-gpu.txt must pin ray"
    assert spec.rayVersion == pinned.group(1), "rayVersion must equal the image's ray"


def _strict_crd_schema(schema: Any) -> Any:
    """The API server prunes unknown fields and `kubectl --validate=strict` rejects them: make
    the CRD's structural schema say so, as jsonschema does not prune."""
    if isinstance(schema, dict):
        out = {k: _strict_crd_schema(v) for k, v in schema.items()}
        preserve = out.get("x-kubernetes-preserve-unknown-fields")
        open_ended = "additionalProperties" in out or preserve
        if "properties" in out and not open_ended:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict_crd_schema(item) for item in schema]
    return schema


KUBERAY_CRD_FIXTURE = (
    Path(__file__).parent / "fixtures" / "kuberay-v1.4.2-ray.io_rayclusters.yaml.gz"
)
KUBERAY_CRD_SHA256 = "84af0b910190ef0875581b7433f9e33bc86086a04c2039dd743f965f00fb364b"


def _kuberay_crd_text() -> str:
    """KubeRay v1.4.2's RayCluster CRD as shipped in tests/infra/fixtures (source and
    checksum in its README), or the file KUBERAY_CRD names (another KubeRay version)."""
    override = os.environ.get("KUBERAY_CRD")
    if override:
        return Path(override).read_text(encoding="utf-8")
    raw = gzip.decompress(KUBERAY_CRD_FIXTURE.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == KUBERAY_CRD_SHA256, "the CRD fixture changed"
    return raw.decode("utf-8")


def test_raycluster_validates_against_the_kuberay_crd_offline(
    k8s_documents: list[tuple[Path, dict[str, Any]]],
) -> None:
    """The full check: KubeRay's own CRD schema, made strict (unknown fields fail)."""
    crd = yaml.safe_load(_kuberay_crd_text())
    assert crd["spec"]["names"]["kind"] == "RayCluster"
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = _strict_crd_schema(version["schema"]["openAPIV3Schema"])
    errors = list(jsonschema.Draft7Validator(schema).iter_errors(_raycluster(k8s_documents)))
    assert not errors, [f"{list(e.absolute_path)}: {e.message[:200]}" for e in errors]


def test_no_secret_objects_or_secret_values_in_git_offline(
    k8s_documents: list[tuple[Path, dict[str, Any]]],
) -> None:
    """Secrets are created out of band; manifests only reference them, by key, so that the
    settings drift test can see which variable each key becomes."""
    for path, doc in k8s_documents:
        assert doc["kind"] != "Secret", f"{path.name}: Secret objects never live in Git"
        for template in _pod_templates(doc):
            for container in template["spec"]["containers"]:
                for source in container.get("envFrom", []):
                    assert "secretRef" not in source, f"{path.name}: use secretKeyRef per key"
                for env in container.get("env", []):
                    if re.search(r"PASSWORD|SECRET|TOKEN|API_KEY", env["name"]):
                        assert "valueFrom" in env, f"{path.name}: literal {env['name']}"


def test_every_pod_runs_as_non_root_with_pinned_images_offline(
    k8s_documents: list[tuple[Path, dict[str, Any]]],
) -> None:
    for path, doc in k8s_documents:
        for template in _pod_templates(doc):
            pod = template["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True, path.name
            for container in pod["containers"]:
                image = container["image"]
                assert re.search(r":[\w.-]+$", image), f"{path.name}: {image} has no tag"
                assert not image.endswith(":latest"), f"{path.name}: floating tag {image}"
                escalation = container["securityContext"]["allowPrivilegeEscalation"]
                assert escalation is False, path.name


def _by_kind(docs: list[tuple[Path, dict[str, Any]]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in docs if doc["kind"] == kind}


def test_services_select_their_deployments_and_probes_hit_health_endpoints_offline(
    k8s_documents: list[tuple[Path, dict[str, Any]]],
) -> None:
    deployments = _by_kind(k8s_documents, "Deployment")
    services = _by_kind(k8s_documents, "Service")
    for name, deployment in deployments.items():
        assert name in services, f"{name}: no Service"
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        selector = services[name]["spec"]["selector"]
        assert selector.items() <= labels.items(), f"{name}: Service selects no pod"
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
        port_names = {
            p["name"]
            for c in deployment["spec"]["template"]["spec"]["containers"]
            for p in c["ports"]
        }
        for port in services[name]["spec"]["ports"]:
            assert port["targetPort"] in port_names, f"{name}: targetPort {port['targetPort']}"
    expected = {"toolrl-serving": "/health", "toolrl-serving-cpu": "/health"}
    expected |= {"toolrl-mcp-mock": "/healthz"}
    expected |= {"toolrl-mcp-real": "/healthz", "mlflow": "/health"}
    for name, path in expected.items():
        container = deployments[name]["spec"]["template"]["spec"]["containers"][0]
        assert container["readinessProbe"]["httpGet"]["path"] == path, name


def test_real_mcp_server_scales_behind_a_service_offline(
    k8s_documents: list[tuple[Path, dict[str, Any]]],
) -> None:
    hpa = _by_kind(k8s_documents, "HorizontalPodAutoscaler")["toolrl-mcp-real"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "toolrl-mcp-real"
    assert 1 < hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
