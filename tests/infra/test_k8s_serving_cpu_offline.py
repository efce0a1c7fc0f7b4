"""The CPU serving variant on Kubernetes (infra/k8s/51-serving-cpu.yaml) is compose's
`serving-cpu` service, checked without a cluster.

It runs the same `toolrl serve --backend cpu` command on the same CPU training image, requests
no GPU, sets exactly the registered "serving" settings with the GPU serving's Secrets, probes
the front door's health endpoint as compose does, and the NetworkPolicies give its pod the same
access as the GPU serving pod's. Each check returns its problems, and a test per broken copy
proves the check fires.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_config_drift_offline import _check_both_directions, collect_compose, collect_k8s
from test_control_plane_security_offline import admitted, cluster_pods

Docs = list[tuple[Path, dict[str, Any]]]
Compose = dict[str, Any]

CPU, GPU = "toolrl-serving-cpu", "toolrl-serving"  # the two serving Deployments
SERVICE = "serving-cpu"  # the compose service this Deployment mirrors
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
# `${VAR:-default}` in compose and `$(VAR)` in Kubernetes: the same variable, two syntaxes.
COMPOSE_VAR = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::?-([^}]*))?\}")
K8S_VAR = re.compile(r"\$\(([A-Z_][A-Z0-9_]*)\)")


def _deployment(docs: Docs, name: str) -> dict[str, Any]:
    (doc,) = [d for _, d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name]
    return doc


def _container(docs: Docs, name: str) -> dict[str, Any]:
    pod = _deployment(docs, name)["spec"]["template"]["spec"]
    containers: list[dict[str, Any]] = pod["containers"]
    (container,) = containers
    return container


def _argv(container: dict[str, Any]) -> list[str]:
    return [str(a) for a in [*container.get("command", []), *container.get("args", [])]]


def _env_values(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


# --- the command -----------------------------------------------------------------------------


def command_problems(compose: Compose, docs: Docs) -> list[str]:
    """The Deployment's argv is compose's, with `$(VAR)` for `${VAR:-default}`, and each
    variable resolves to compose's default (Kubernetes leaves an undefined `$(VAR)` as text)."""
    problems = []
    service_argv = [str(a) for a in compose["services"][SERVICE]["command"]]
    container = _container(docs, CPU)
    pod_argv = _argv(container)
    compose_form = [COMPOSE_VAR.sub(r"<\1>", a) for a in service_argv]
    k8s_form = [K8S_VAR.sub(r"<\1>", a) for a in pod_argv]
    if k8s_form != compose_form:
        problems.append(f"{CPU} runs {k8s_form}, compose's {SERVICE} runs {compose_form}")
    if "--backend cpu" not in " ".join(pod_argv):
        problems.append(f"{CPU} does not run the CPU engine (--backend cpu)")
    defaults = {m[0]: m[1] for a in service_argv for m in COMPOSE_VAR.findall(a)}
    env = _env_values(container)
    for var in {v for a in pod_argv for v in K8S_VAR.findall(a)}:
        if var not in env:
            problems.append(f"{CPU}: $({var}) is not set in its env (it would stay literal)")
        elif var in defaults and env[var] != defaults[var]:
            problems.append(f"{CPU}: {var}={env[var]}, compose's default is {defaults[var]}")
    return problems


def test_cpu_serving_runs_the_compose_serving_cpu_command_offline(
    compose: Compose, k8s_documents: Docs
) -> None:
    problems = command_problems(compose, k8s_documents)
    assert not problems, "\n".join(problems)


# --- image and resources ---------------------------------------------------------------------


def image_problems(compose: Compose, docs: Docs) -> list[str]:
    """The CPU training image, by compose's name and tag (registry prefix aside)."""
    problems = []
    service = compose["services"][SERVICE]
    if not str(service["build"]["dockerfile"]).endswith("/training-cpu.Dockerfile"):
        problems.append(f"compose's {SERVICE} is no longer built from training-cpu.Dockerfile")
    image = _container(docs, CPU)["image"]
    if image.rsplit("/", 1)[-1] != service["image"]:
        problems.append(f"{CPU} runs image {image}, compose's {SERVICE} {service['image']}")
    return problems


def test_cpu_serving_uses_the_cpu_training_image_offline(
    compose: Compose, k8s_documents: Docs
) -> None:
    problems = image_problems(compose, k8s_documents)
    assert not problems, "\n".join(problems)


def gpu_problems(docs: Docs) -> list[str]:
    """No GPU resource, no GPU toleration or node selection; CPU and memory are requested,
    memory bounded."""
    problems = []
    pod = _deployment(docs, CPU)["spec"]["template"]["spec"]
    for container in pod["containers"]:
        resources = container.get("resources", {})
        requests, limits = resources.get("requests", {}), resources.get("limits", {})
        for name in [*requests, *limits]:
            if "gpu" in name.lower():
                problems.append(f"{CPU}/{container['name']} requests a GPU ({name})")
        if not {"cpu", "memory"} <= set(requests):
            problems.append(f"{CPU}/{container['name']} requests no CPU or no memory")
        if limits.get("memory") != requests.get("memory"):
            problems.append(f"{CPU}/{container['name']}: memory limit must equal the request")
    placement = {k: pod.get(k) for k in ("tolerations", "nodeSelector", "affinity")}
    if "gpu" in str(placement).lower():
        problems.append(f"{CPU} is placed on GPU nodes: {placement}")
    return problems


def test_cpu_serving_requests_no_gpu_offline(k8s_documents: Docs) -> None:
    problems = gpu_problems(k8s_documents)
    assert not problems, "\n".join(problems)


# --- settings and Secrets --------------------------------------------------------------------


def env_problems(compose: Compose, docs: Docs) -> list[str]:
    """Its pod is a "serving" workload whose env (ConfigMap keys included) is exactly the
    registered serving keys (the drift test's check) and exactly compose's serving-cpu's."""
    found = collect_k8s(docs).get("serving", {})
    if CPU not in found:
        return [f"{CPU} is not a serving workload (toolrl.io/component: serving)"]
    problems = _check_both_directions("k8s", {"serving": {CPU: found[CPU]}})
    in_compose = collect_compose(compose)["serving"][SERVICE]
    if found[CPU] != in_compose:
        extra, missing = sorted(found[CPU] - in_compose), sorted(in_compose - found[CPU])
        problems.append(f"{CPU} sets {extra} beyond compose's {SERVICE}, lacks {missing}")
    return problems


def test_cpu_serving_env_is_the_registered_serving_keys_offline(
    compose: Compose, k8s_documents: Docs
) -> None:
    problems = env_problems(compose, k8s_documents)
    assert not problems, "\n".join(problems)


def secret_problems(docs: Docs) -> list[str]:
    """The same env entries as the GPU serving: the same Secrets and keys (front door key, MCP
    token, MLflow serving password, object store), the same identity and URLs."""
    cpu, gpu = _container(docs, CPU), _container(docs, GPU)
    cpu_env = {e["name"]: e for e in cpu.get("env", [])}
    gpu_env = {e["name"]: e for e in gpu.get("env", [])}
    problems = [
        f"{CPU}: {name} is {cpu_env.get(name)}, {GPU} has {gpu_env.get(name)}"
        for name in sorted(cpu_env.keys() | gpu_env.keys())
        if cpu_env.get(name) != gpu_env.get(name)
    ]
    if cpu.get("envFrom") != gpu.get("envFrom"):
        problems.append(f"{CPU}: envFrom {cpu.get('envFrom')} differs from {GPU}'s")
    return problems


def test_cpu_serving_uses_the_gpu_servings_secrets_offline(k8s_documents: Docs) -> None:
    problems = secret_problems(k8s_documents)
    assert not problems, "\n".join(problems)


# --- probes, user, cache ---------------------------------------------------------------------


def pod_problems(compose: Compose, docs: Docs) -> list[str]:
    """Probes hit the path and port compose's health check does; the pod runs as compose's
    uid; --cache-dir lies on a volume (writable, not the image's filesystem)."""
    problems = []
    service = compose["services"][SERVICE]
    check = " ".join(str(a) for a in service["healthcheck"]["test"])
    match = re.search(r"http://127\.0\.0\.1:(\d+)(/[\w/-]*)", check)
    assert match, f"compose's {SERVICE} health check calls no local URL: {check}"
    port, path = int(match.group(1)), match.group(2)
    pod = _deployment(docs, CPU)["spec"]["template"]["spec"]
    container = _container(docs, CPU)
    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
    argv = _argv(container)
    if argv[argv.index("--port") + 1] != str(port):
        problems.append(f"{CPU}: --port is not compose's {port}")
    for probe in PROBES:
        get = container.get(probe, {}).get("httpGet", {})
        target = ports.get(get.get("port"), get.get("port"))
        if get.get("path") != path or target != port:
            problems.append(f"{CPU}: {probe} {get} is not compose's {path} on {port}")
    uid = int(str(service["user"]).split(":")[0])
    context = pod.get("securityContext", {})
    if context.get("runAsUser") != uid or context.get("runAsNonRoot") is not True:
        problems.append(f"{CPU}: runs as {context}, compose's {SERVICE} as uid {uid}")
    cache = Path(argv[argv.index("--cache-dir") + 1])
    volumes = {v["name"] for v in pod.get("volumes", [])}
    mounted = [m for m in container.get("volumeMounts", []) if cache.is_relative_to(m["mountPath"])]
    if not mounted or mounted[0]["name"] not in volumes:
        problems.append(f"{CPU}: --cache-dir {cache} is not on a volume")
    return problems


def test_cpu_serving_probes_user_and_cache_follow_compose_offline(
    compose: Compose, k8s_documents: Docs
) -> None:
    problems = pod_problems(compose, k8s_documents)
    assert not problems, "\n".join(problems)


# --- NetworkPolicies -------------------------------------------------------------------------


def policy_problems(docs: Docs) -> list[str]:
    """Its pod reaches exactly what the GPU serving pod reaches and is reached by exactly the
    GPU serving pod's callers, on every port; and that access is not nothing."""
    policies = [d for _, d in docs if d["kind"] == "NetworkPolicy"]
    pods = {pod.name: pod for pod in cluster_pods(docs)}
    cpu, gpu = pods[CPU], pods[GPU]
    problems = []
    for other in pods.values():
        if other.name in {CPU, GPU}:
            continue
        for port in sorted(set(other.ports.values())):
            from_cpu = admitted(policies, cpu, other, port)
            from_gpu = admitted(policies, gpu, other, port)
            if from_cpu != from_gpu:
                problems.append(f"{other.name}:{port} admits {GPU} {from_gpu}, {CPU} {from_cpu}")
        for port in (8000, 8100):  # the front door; an engine's port (loopback, never admitted)
            to_cpu = admitted(policies, other, cpu, port)
            to_gpu = admitted(policies, other, gpu, port)
            if to_cpu != to_gpu:
                problems.append(f"{other.name} -> {CPU}:{port} {to_cpu}, -> {GPU}:{port} {to_gpu}")
    wanted = [(cpu, pods["mlflow"], 5000), (cpu, pods["toolrl-mcp-real"], 8000)]
    wanted.append((pods["ingress"], cpu, 8000))
    for caller, target, port in wanted:
        if not admitted(policies, caller, target, port):
            problems.append(f"{caller.name} cannot reach {target.name}:{port}")
    return problems


def test_network_policies_treat_the_cpu_serving_pod_as_the_gpu_one_offline(
    k8s_documents: Docs,
) -> None:
    problems = policy_problems(k8s_documents)
    assert not problems, "\n".join(problems)


# --- each check fires on a broken copy -------------------------------------------------------


def _cpu(docs: Docs) -> dict[str, Any]:
    return _container(docs, CPU)


def _set_arg(docs: Docs, old: str, new: str) -> None:
    args = _cpu(docs)["args"]
    args[args.index(old)] = new


def _set_env(docs: Docs, name: str, **entry: Any) -> None:
    env = _cpu(docs)["env"]
    env[:] = [({"name": name, **entry} if e["name"] == name else e) for e in env]


def _rename_env(docs: Docs, old: str, new: str) -> None:
    for entry in _cpu(docs)["env"]:
        if entry["name"] == old:
            entry["name"] = new


def _policy_values(docs: Docs, policy: str) -> list[str]:
    (doc,) = [
        d for _, d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == policy
    ]
    peer = doc["spec"]["ingress"][0]["from"][0] if policy != "serving-ingress" else doc["spec"]
    values: list[str] = peer["podSelector"]["matchExpressions"][0]["values"]
    return values


Check = Callable[[Compose, Docs], list[str]]
BREAKS: dict[str, tuple[Callable[[Compose, Docs], None], Check, str]] = {
    "max-tokens-differs": (
        lambda c, d: _set_arg(d, "256", "1024"),
        command_problems,
        f"{CPU} runs",
    ),
    "gpu-engine": (
        lambda c, d: _set_arg(d, "cpu", "vllm"),
        command_problems,
        "does not run the CPU engine",
    ),
    "model-variable-typo": (
        lambda c, d: _set_arg(
            d, "models:/$(TOOLRL_MODEL_NAME)@champion", "models:/$(TOOLRL_MODEL)@champion"
        ),
        command_problems,
        "$(TOOLRL_MODEL) is not set in its env",
    ),
    "another-model": (
        lambda c, d: _set_env(d, "TOOLRL_MODEL_NAME", value="other-model"),
        command_problems,
        "TOOLRL_MODEL_NAME=other-model, compose's default is toolrl-tool-caller",
    ),
    "gpu-image": (
        lambda c, d: _cpu(d).update(image="registry.example.com/toolrl/toolrl-serving:0.1.0"),
        image_problems,
        "runs image registry.example.com/toolrl/toolrl-serving:0.1.0",
    ),
    "gpu-requested": (
        lambda c, d: _cpu(d)["resources"]["requests"].update({"nvidia.com/gpu": "1"}),
        lambda c, d: gpu_problems(d),
        "requests a GPU (nvidia.com/gpu)",
    ),
    "gpu-toleration": (
        lambda c, d: _deployment(d, CPU)["spec"]["template"]["spec"].update(
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]
        ),
        lambda c, d: gpu_problems(d),
        "is placed on GPU nodes",
    ),
    "misspelt-setting": (
        lambda c, d: _rename_env(d, "TOOLRL_MCP_URL", "TOOLRL_MCP_ULR"),
        env_problems,
        "never reads: ['TOOLRL_MCP_ULR']",
    ),
    "compose-and-k8s-differ": (
        lambda c, d: c["services"][SERVICE]["environment"].pop("AWS_DEFAULT_REGION"),
        env_problems,
        f"sets ['AWS_DEFAULT_REGION'] beyond compose's {SERVICE}",
    ),
    "not-a-serving-pod": (
        lambda c, d: _deployment(d, CPU)["spec"]["template"]["metadata"]["labels"].update(
            {"toolrl.io/component": "mcp"}
        ),
        env_problems,
        f"{CPU} is not a serving workload",
    ),
    "another-frontdoor-secret": (
        lambda c, d: _set_env(
            d,
            "TOOLRL_FRONTDOOR_API_KEY",
            valueFrom={"secretKeyRef": {"name": "toolrl-frontdoor-cpu", "key": "api-key"}},
        ),
        lambda c, d: secret_problems(d),
        f"{CPU}: TOOLRL_FRONTDOOR_API_KEY is",
    ),
    "probe-on-another-path": (
        lambda c, d: _cpu(d)["livenessProbe"]["httpGet"].update(path="/healthz"),
        pod_problems,
        "livenessProbe",
    ),
    "cache-off-the-volume": (
        lambda c, d: _cpu(d)["volumeMounts"][0].update(mountPath="/home/ray/.cache"),
        pod_problems,
        "--cache-dir /var/lib/toolrl/models is not on a volume",
    ),
    "mcp-real-forgets-the-cpu-pod": (
        lambda c, d: _policy_values(d, "mcp-real-ingress").remove(CPU),
        lambda c, d: policy_problems(d),
        f"toolrl-mcp-real:8000 admits {GPU} True, {CPU} False",
    ),
    "front-door-policy-forgets-the-cpu-pod": (
        lambda c, d: _policy_values(d, "serving-ingress").remove(CPU),
        lambda c, d: policy_problems(d),
        f"ingress -> {CPU}:8000 False, -> {GPU}:8000 True",
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_cpu_serving_checks_catch_a_broken_copy_offline(
    compose: Compose, k8s_documents: Docs, case: str
) -> None:
    mutate, check, expected = BREAKS[case]
    broken_compose, broken_docs = copy.deepcopy(compose), copy.deepcopy(k8s_documents)
    assert not check(broken_compose, broken_docs), f"{case}: the unbroken copy has problems"
    mutate(broken_compose, broken_docs)
    problems = "\n".join(check(broken_compose, broken_docs))
    assert expected in problems, problems
