"""Control-plane security of the deployments under infra/, checked without a cluster.

The Ray Jobs API runs arbitrary code for whoever reaches it, MLflow's `champion` alias decides
what users are served, the MCP servers act on the world and the front door spends GPU time.
So no compose service or Kubernetes workload may run one of them with auth off:

* Ray: every node (compose services, the RayCluster's head and worker groups, the autoscaler
  sidecar) sets RAY_AUTH_MODE=token and a required RAY_AUTH_TOKEN;
* MLflow: every server runs `--app-name basic-auth`, with its admin password, Flask secret and
  user database from secrets, from an image that installs `mlflow[auth]`;
* the MCP servers require TOOLRL_MCP_TOKEN, serving requires TOOLRL_FRONTDOOR_API_KEY;
* clients carry their credentials: Ray as MLflow user toolrl-pipeline, serving as
  toolrl-serving, Airflow's toolrl_ray / toolrl_mlflow / toolrl_mcp connections with a password.

"Required" means compose's `${X:?message}` (compose refuses to start without X) and a
Kubernetes secretKeyRef without `optional: true` (the pod does not start without it).

Also: every Secret and `.env` variable the files reference is documented (env.example and
docs/DEPLOY.md create each one), and the NetworkPolicies, evaluated here against the pods the
manifests, KubeRay and the Airflow chart create, admit exactly the callers DEPLOY.md lists.
Each check returns its problems, and a test per check proves it fires on a broken copy.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from infra_files import COMPOSE_FILE, DOCKER_DIR, REPO

Docs = list[tuple[Path, dict[str, Any]]]

REQUIRED = re.compile(r"^\$\{([A-Z_][A-Z0-9_]*):\?[^}]+\}$")  # the whole value is ${X:?msg}
INTERPOLATION = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(:?[-?])?([^}]*)\}")
CONTROL_PLANE_SECRETS = {
    "RAY_AUTH_TOKEN",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_AUTH_ADMIN_USERNAME",
    "MLFLOW_AUTH_ADMIN_PASSWORD",
    "MLFLOW_AUTH_DATABASE_URI",
    "MLFLOW_FLASK_SERVER_SECRET_KEY",
    "MLFLOW_PIPELINE_PASSWORD",
    "MLFLOW_SERVING_PASSWORD",
    "TOOLRL_MCP_TOKEN",
    "TOOLRL_FRONTDOOR_API_KEY",
    "AIRFLOW_CONN_TOOLRL_RAY",
    "AIRFLOW_CONN_TOOLRL_MLFLOW",
    "AIRFLOW_CONN_TOOLRL_MCP",
}
PIPELINE_USER, SERVING_USER = "toolrl-pipeline", "toolrl-serving"
DEPLOY_GUIDE = REPO / "docs" / "DEPLOY.md"
ENV_EXAMPLE = COMPOSE_FILE.parent / "env.example"


def _uses_basic_auth(args: list[str]) -> bool:
    joined = " ".join(args)
    return bool(re.search(r"--app-name[= ]basic-auth(\s|$)", joined))


def _args(value: Any) -> list[str]:
    if value is None:
        return []
    return value.split() if isinstance(value, str) else [str(v) for v in value]


# --- compose ---------------------------------------------------------------------------


def _placeholders(value: str) -> str:
    """`${X:?m}` -> `required-X`, `${X:-d}` -> `optional-X`: parseable as a URL password."""

    def sub(match: re.Match[str]) -> str:
        return f"{'required' if match.group(2) == ':?' else 'optional'}-{match.group(1)}"

    return INTERPOLATION.sub(sub, value)


def _compose_conn_problems(name: str, env: dict[str, Any]) -> list[str]:
    """Airflow's connections to the control planes carry a required credential."""
    problems = []
    wanted = {
        "AIRFLOW_CONN_TOOLRL_RAY": ("", "RAY_AUTH_TOKEN"),
        "AIRFLOW_CONN_TOOLRL_MLFLOW": (PIPELINE_USER, "MLFLOW_PIPELINE_PASSWORD"),
        "AIRFLOW_CONN_TOOLRL_MCP": ("", "TOOLRL_MCP_TOKEN"),
    }
    for key, (login, secret) in wanted.items():
        url = urlsplit(_placeholders(str(env.get(key, ""))))
        if url.password != f"required-{secret}" or (url.username or "") != login:
            problems.append(f"compose/{name}: {key} must be http://{login}:${{{secret}:?...}}@host")
    return problems


def compose_auth_problems(compose: dict[str, Any]) -> list[str]:
    problems: list[str] = []

    def require(name: str, env: dict[str, Any], key: str) -> None:
        if not REQUIRED.match(str(env.get(key, ""))):
            problems.append(f"compose/{name}: {key} must be a required secret ${{X:?...}}")

    def equal(name: str, env: dict[str, Any], key: str, value: str) -> None:
        if str(env.get(key)) != value:
            problems.append(f"compose/{name}: {key} must be {value}")

    for name, service in compose["services"].items():
        env = service.get("environment") or {}
        component = service.get("labels", {}).get("toolrl.component")
        command = _args(service.get("entrypoint")) + _args(service.get("command"))
        for key, value in env.items():
            for var, form, _ in INTERPOLATION.findall(str(value)):
                if var in CONTROL_PLANE_SECRETS and form != ":?":
                    problems.append(f"compose/{name}: {key} takes {var} optionally")
        if (
            component == "ray"
            or "ray start" in " ".join(command)
            or command[:2] == ["ray", "start"]
        ):
            equal(name, env, "RAY_AUTH_MODE", "token")
            require(name, env, "RAY_AUTH_TOKEN")
            equal(name, env, "MLFLOW_TRACKING_USERNAME", PIPELINE_USER)
            require(name, env, "MLFLOW_TRACKING_PASSWORD")
            require(name, env, "TOOLRL_MCP_TOKEN")
        if component == "mcp":
            require(name, env, "TOOLRL_MCP_TOKEN")
        if component == "serving":
            require(name, env, "TOOLRL_FRONTDOOR_API_KEY")
            equal(name, env, "MLFLOW_TRACKING_USERNAME", SERVING_USER)
            require(name, env, "MLFLOW_TRACKING_PASSWORD")
            require(name, env, "TOOLRL_MCP_TOKEN")
        if component == "airflow":
            problems += _compose_conn_problems(name, env)
        runs_mlflow_server = "toolrl-mlflow" in str(service.get("image")) and (
            "entrypoint" not in service
        )
        if runs_mlflow_server or "mlflow server" in " ".join(command):
            if not _uses_basic_auth(command):
                problems.append(f"compose/{name}: mlflow server without --app-name basic-auth")
            for key in ("MLFLOW_AUTH_CONFIG_PATH", "MLFLOW_AUTH_DATABASE_URI"):
                if not env.get(key):
                    problems.append(f"compose/{name}: {key} unset")
            for key in ("MLFLOW_AUTH_ADMIN_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY"):
                require(name, env, key)
        test = " ".join(_args((service.get("healthcheck") or {}).get("test")))
        if ":8265" in test and "RAY_AUTH_TOKEN" not in test:
            problems.append(f"compose/{name}: its Jobs API health check sends no token (401)")
    return problems


def test_no_compose_service_runs_a_control_plane_with_auth_off_offline(
    compose: dict[str, Any],
) -> None:
    problems = compose_auth_problems(compose)
    assert not problems, "\n".join(problems)


def _env(service: dict[str, Any]) -> dict[str, Any]:
    return service.setdefault("environment", {})


COMPOSE_BREAKS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "ray-auth-mode-off": (
        lambda d: _env(d["services"]["ray-gpu-worker"]).update(RAY_AUTH_MODE="disabled"),
        "ray-gpu-worker: RAY_AUTH_MODE must be token",
    ),
    "ray-token-missing": (
        lambda d: _env(d["services"]["ray-head"]).pop("RAY_AUTH_TOKEN"),
        "ray-head: RAY_AUTH_TOKEN must be a required secret",
    ),
    "ray-token-optional": (
        lambda d: _env(d["services"]["ray-head"]).update(RAY_AUTH_TOKEN="${RAY_AUTH_TOKEN:-}"),
        "ray-head: RAY_AUTH_TOKEN takes RAY_AUTH_TOKEN optionally",
    ),
    "mlflow-auth-app-off": (
        lambda d: d["services"]["mlflow"]["command"].remove("--app-name=basic-auth"),
        "mlflow: mlflow server without --app-name basic-auth",
    ),
    "mlflow-admin-literal": (
        lambda d: _env(d["services"]["mlflow"]).update(MLFLOW_AUTH_ADMIN_PASSWORD="password1234"),
        "mlflow: MLFLOW_AUTH_ADMIN_PASSWORD must be a required secret",
    ),
    "mcp-auth-off": (
        lambda d: _env(d["services"]["mcp-real"]).update(TOOLRL_MCP_TOKEN="${TOOLRL_MCP_TOKEN:-}"),
        "mcp-real: TOOLRL_MCP_TOKEN takes TOOLRL_MCP_TOKEN optionally",
    ),
    "frontdoor-open": (
        lambda d: _env(d["services"]["vllm"]).pop("TOOLRL_FRONTDOOR_API_KEY"),
        "vllm: TOOLRL_FRONTDOOR_API_KEY must be a required secret",
    ),
    "serving-as-pipeline": (
        lambda d: _env(d["services"]["vllm"]).update(MLFLOW_TRACKING_USERNAME=PIPELINE_USER),
        "vllm: MLFLOW_TRACKING_USERNAME must be toolrl-serving",
    ),
    "airflow-ray-conn-without-token": (
        lambda d: _env(d["services"]["airflow-scheduler"]).update(
            AIRFLOW_CONN_TOOLRL_RAY="http://ray-head:8265"
        ),
        "airflow-scheduler: AIRFLOW_CONN_TOOLRL_RAY must be http://:${RAY_AUTH_TOKEN:?...}",
    ),
    "airflow-mlflow-anonymous": (
        lambda d: _env(d["services"]["airflow-triggerer"]).update(
            AIRFLOW_CONN_TOOLRL_MLFLOW="http://mlflow:5000"
        ),
        "airflow-triggerer: AIRFLOW_CONN_TOOLRL_MLFLOW must be http://toolrl-pipeline:",
    ),
    "ray-health-check-without-token": (
        lambda d: d["services"]["ray-head"]["healthcheck"].update(
            test=["CMD", "curl", "-fsS", "http://127.0.0.1:8265/api/version"]
        ),
        "ray-head: its Jobs API health check sends no token",
    ),
    "unlabelled-ray-node": (
        lambda d: d["services"].update(
            extra={"image": "x:1", "command": ["ray", "start", "--address=ray-head:6379"]}
        ),
        "extra: RAY_AUTH_MODE must be token",
    ),
}


@pytest.mark.parametrize("case", sorted(COMPOSE_BREAKS))
def test_compose_auth_check_catches_a_control_plane_left_open_offline(
    compose: dict[str, Any], case: str
) -> None:
    mutate, expected = COMPOSE_BREAKS[case]
    broken = copy.deepcopy(compose)
    mutate(broken)
    problems = "\n".join(compose_auth_problems(broken))
    assert expected in problems, problems


# --- Kubernetes and Helm -----------------------------------------------------------------


@dataclass
class Container:
    where: str  # file/workload/container
    role: str  # ray | ray-autoscaler | serving | mcp | mlflow-server | other
    spec: dict[str, Any]

    def env(self) -> dict[str, dict[str, Any]]:
        return {entry["name"]: entry for entry in self.spec.get("env", [])}


def _role(component: str | None, container: dict[str, Any]) -> str:
    image = str(container.get("image", ""))
    if "toolrl-mlflow" in image and "command" not in container:
        return "mlflow-server"  # the image's entrypoint runs `mlflow server`
    if "mlflow" in _args(container.get("command")) and "server" in _args(container.get("args")):
        return "mlflow-server"
    return component if component in {"serving", "mcp"} else "other"


def k8s_containers(docs: Docs) -> Iterator[Container]:
    for path, doc in docs:
        spec, name = doc.get("spec", {}), doc["metadata"]["name"]
        if doc["kind"] == "RayCluster":
            groups = [
                ("head", spec["headGroupSpec"]),
                *[(g["groupName"], g) for g in spec["workerGroupSpecs"]],
            ]
            for group, body in groups:
                for c in body["template"]["spec"]["containers"]:
                    yield Container(f"{path.name}/{name}-{group}/{c['name']}", "ray", c)
            if spec.get("enableInTreeAutoscaling"):
                sidecar = {
                    "name": "autoscaler",
                    "env": spec.get("autoscalerOptions", {}).get("env", []),
                }
                yield Container(f"{path.name}/{name}/autoscaler", "ray-autoscaler", sidecar)
        elif "template" in spec:
            template = spec["template"]
            component = template["metadata"].get("labels", {}).get("toolrl.io/component")
            for c in template["spec"]["containers"]:
                yield Container(f"{path.name}/{name}/{c['name']}", _role(component, c), c)


def _secret_ref(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    ref = entry.get("valueFrom", {}).get("secretKeyRef")
    return ref if isinstance(ref, dict) else None


def k8s_auth_problems(docs: Docs) -> list[str]:
    problems: list[str] = []
    for container in k8s_containers(docs):
        env, where = container.env(), container.where

        def require(key: str, env: dict[str, dict[str, Any]] = env, where: str = where) -> None:
            ref = _secret_ref(env.get(key))
            if ref is None or ref.get("optional"):
                problems.append(f"{where}: {key} must come from a required secretKeyRef")

        def equal(
            key: str, value: str, env: dict[str, dict[str, Any]] = env, where: str = where
        ) -> None:
            if env.get(key, {}).get("value") != value:
                problems.append(f"{where}: {key} must be {value}")

        for key, entry in env.items():
            ref = _secret_ref(entry)
            if ref is not None and ref.get("optional") and key in CONTROL_PLANE_SECRETS:
                problems.append(f"{where}: {key} is an optional secret (auth off without it)")
        if container.role in {"ray", "ray-autoscaler"}:
            equal("RAY_AUTH_MODE", "token")
            require("RAY_AUTH_TOKEN")
        if container.role == "ray":
            equal("MLFLOW_TRACKING_USERNAME", PIPELINE_USER)
            require("MLFLOW_TRACKING_PASSWORD")
            require("TOOLRL_MCP_TOKEN")
        if container.role == "mcp":
            require("TOOLRL_MCP_TOKEN")
        if container.role == "serving":
            require("TOOLRL_FRONTDOOR_API_KEY")
            equal("MLFLOW_TRACKING_USERNAME", SERVING_USER)
            require("MLFLOW_TRACKING_PASSWORD")
            require("TOOLRL_MCP_TOKEN")
        if container.role == "mlflow-server":
            if not _uses_basic_auth(_args(container.spec.get("args"))):
                problems.append(f"{where}: mlflow server without --app-name basic-auth")
            if not env.get("MLFLOW_AUTH_CONFIG_PATH", {}).get("value"):
                problems.append(f"{where}: MLFLOW_AUTH_CONFIG_PATH unset")
            for key in (
                "MLFLOW_AUTH_DATABASE_URI",
                "MLFLOW_AUTH_ADMIN_USERNAME",
                "MLFLOW_AUTH_ADMIN_PASSWORD",
                "MLFLOW_FLASK_SERVER_SECRET_KEY",
            ):
                require(key)
    return problems


def helm_auth_problems(values: dict[str, Any]) -> list[str]:
    """Airflow's control-plane connections come from Secrets, none optional."""
    problems = []
    from_secret = {entry["envName"] for entry in values.get("secret", [])}
    for entry in yaml.safe_load(values.get("extraEnv") or "[]"):
        ref = _secret_ref(entry)
        if ref is not None:
            if ref.get("optional") and entry["name"] in CONTROL_PLANE_SECRETS:
                problems.append(f"helm: {entry['name']} is an optional secret")
            elif not ref.get("optional"):
                from_secret.add(entry["name"])
    plain = {entry["name"] for entry in values.get("env", [])}
    for key in ("AIRFLOW_CONN_TOOLRL_RAY", "AIRFLOW_CONN_TOOLRL_MLFLOW", "AIRFLOW_CONN_TOOLRL_MCP"):
        if key in plain:
            problems.append(f"helm: {key} is a plain value (it must carry a credential)")
        if key not in from_secret:
            problems.append(f"helm: {key} must come from a required Secret")
    return problems


def test_no_k8s_workload_or_helm_value_runs_a_control_plane_with_auth_off_offline(
    k8s_documents: Docs, helm_values: dict[str, Any]
) -> None:
    roles = {c.role for c in k8s_containers(k8s_documents)}
    assert {"ray", "ray-autoscaler", "serving", "mcp", "mlflow-server"} <= roles
    problems = k8s_auth_problems(k8s_documents) + helm_auth_problems(helm_values)
    assert not problems, "\n".join(problems)


def _doc(docs: Docs, kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for _, d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _container_env(docs: Docs, kind: str, name: str) -> list[dict[str, Any]]:
    return _doc(docs, kind, name)["spec"]["template"]["spec"]["containers"][0]["env"]


def _worker_env(docs: Docs) -> list[dict[str, Any]]:
    cluster = _doc(docs, "RayCluster", "toolrl")
    return cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["env"]


def _drop(env: list[dict[str, Any]], name: str) -> None:
    env[:] = [e for e in env if e["name"] != name]


def _make_optional(env: list[dict[str, Any]], name: str) -> None:
    for entry in env:
        if entry["name"] == name:
            entry["valueFrom"]["secretKeyRef"]["optional"] = True


K8S_BREAKS: dict[str, tuple[Callable[[Docs], None], str]] = {
    "ray-worker-without-token": (
        lambda d: _drop(_worker_env(d), "RAY_AUTH_TOKEN"),
        "toolrl-gpu/ray-worker: RAY_AUTH_TOKEN must come from a required secretKeyRef",
    ),
    "ray-worker-auth-mode-off": (
        lambda d: _drop(_worker_env(d), "RAY_AUTH_MODE"),
        "toolrl-gpu/ray-worker: RAY_AUTH_MODE must be token",
    ),
    "autoscaler-without-token": (
        lambda d: _doc(d, "RayCluster", "toolrl")["spec"]["autoscalerOptions"].pop("env"),
        "toolrl/autoscaler: RAY_AUTH_MODE must be token",
    ),
    "mlflow-auth-app-off": (
        lambda d: _doc(d, "Deployment", "mlflow")["spec"]["template"]["spec"]["containers"][0][
            "args"
        ].remove("--app-name=basic-auth"),
        "mlflow/mlflow: mlflow server without --app-name basic-auth",
    ),
    "mlflow-flask-secret-missing": (
        lambda d: _drop(
            _container_env(d, "Deployment", "mlflow"), "MLFLOW_FLASK_SERVER_SECRET_KEY"
        ),
        "mlflow/mlflow: MLFLOW_FLASK_SERVER_SECRET_KEY must come from a required secretKeyRef",
    ),
    "mcp-token-optional": (
        lambda d: _make_optional(
            _container_env(d, "Deployment", "toolrl-mcp-mock"), "TOOLRL_MCP_TOKEN"
        ),
        "toolrl-mcp-mock/mcp: TOOLRL_MCP_TOKEN is an optional secret",
    ),
    "frontdoor-key-optional": (
        lambda d: _make_optional(
            _container_env(d, "Deployment", "toolrl-serving"), "TOOLRL_FRONTDOOR_API_KEY"
        ),
        "toolrl-serving/vllm: TOOLRL_FRONTDOOR_API_KEY must come from a required secretKeyRef",
    ),
    "serving-without-mlflow-identity": (
        lambda d: _drop(
            _container_env(d, "Deployment", "toolrl-serving"), "MLFLOW_TRACKING_PASSWORD"
        ),
        "toolrl-serving/vllm: MLFLOW_TRACKING_PASSWORD must come from a required secretKeyRef",
    ),
}


@pytest.mark.parametrize("case", sorted(K8S_BREAKS))
def test_k8s_auth_check_catches_a_control_plane_left_open_offline(
    k8s_documents: Docs, case: str
) -> None:
    mutate, expected = K8S_BREAKS[case]
    broken = copy.deepcopy(k8s_documents)
    mutate(broken)
    problems = "\n".join(k8s_auth_problems(broken))
    assert expected in problems, problems


def test_helm_auth_check_catches_connections_without_credentials_offline(
    helm_values: dict[str, Any],
) -> None:
    broken = copy.deepcopy(helm_values)
    broken["secret"] = [e for e in broken["secret"] if e["envName"] != "AIRFLOW_CONN_TOOLRL_RAY"]
    broken["env"].append(
        {"name": "AIRFLOW_CONN_TOOLRL_RAY", "value": "http://toolrl-head-svc.toolrl.svc:8265"}
    )
    broken["extraEnv"] += (
        "- name: AIRFLOW_CONN_TOOLRL_MCP\n"
        "  valueFrom: {secretKeyRef: {name: x, key: y, optional: true}}\n"
    )
    problems = "\n".join(helm_auth_problems(broken))
    assert "AIRFLOW_CONN_TOOLRL_RAY is a plain value" in problems
    assert "AIRFLOW_CONN_TOOLRL_MCP is an optional secret" in problems


def test_the_autoscaler_env_is_valid_kubernetes_env_offline(k8s_documents: Docs) -> None:
    """autoscalerOptions.env becomes the sidecar container's env: core EnvVar rules apply."""
    import kubernetes_validate

    env = _doc(k8s_documents, "RayCluster", "toolrl")["spec"]["autoscalerOptions"]["env"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "autoscaler-env-probe", "namespace": "toolrl"},
        "spec": {"containers": [{"name": "autoscaler", "image": "x:1", "env": env}]},
    }
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)


def test_mlflow_image_has_the_auth_app_and_the_checking_entrypoint_offline() -> None:
    assert not mlflow_image_problems(
        (DOCKER_DIR / "mlflow.Dockerfile").read_text(encoding="utf-8"),
        (DOCKER_DIR / "mlflow.Dockerfile.dockerignore").read_text(encoding="utf-8"),
    )


def mlflow_image_problems(dockerfile: str, dockerignore: str) -> list[str]:
    """`--app-name basic-auth` needs mlflow's `auth` extra (Flask-WTF); the entrypoint that
    writes the auth config and refuses to run without the app must be in the image."""
    problems = []
    if not re.search(r'"mlflow\[auth\]==[\d.]+"', dockerfile):
        problems.append("mlflow.Dockerfile must install mlflow[auth]==<version>")
    if "infra/docker/mlflow_auth.py /usr/local/bin/toolrl-mlflow" not in dockerfile:
        problems.append("mlflow.Dockerfile must install mlflow_auth.py as toolrl-mlflow")
    if 'ENTRYPOINT ["toolrl-mlflow", "serve"]' not in dockerfile:
        problems.append("mlflow.Dockerfile's entrypoint must be toolrl-mlflow serve")
    if "!infra/docker/mlflow_auth.py" not in dockerignore.splitlines():
        problems.append("mlflow.Dockerfile.dockerignore must send mlflow_auth.py")
    return problems


def test_mlflow_image_check_catches_a_missing_auth_extra_offline() -> None:
    dockerfile = (DOCKER_DIR / "mlflow.Dockerfile").read_text(encoding="utf-8")
    broken = dockerfile.replace("mlflow[auth]==", "mlflow==").replace(
        'ENTRYPOINT ["toolrl-mlflow", "serve"]', 'ENTRYPOINT ["mlflow", "server"]'
    )
    problems = "\n".join(mlflow_image_problems(broken, "*\n"))
    assert "mlflow[auth]" in problems
    assert "entrypoint must be toolrl-mlflow serve" in problems
    assert "must send mlflow_auth.py" in problems


# --- every referenced secret is documented -------------------------------------------------

CHART_SECRET_KEYS = {  # the Airflow chart's own Secret values and the key it reads from each
    "metadataSecretName": "connection",
    "fernetKeySecretName": "fernet-key",
    "apiSecretKeySecretName": "api-secret-key",
    "jwtSecretName": "jwt-secret",
}


def referenced_k8s_secrets(docs: Docs, values: dict[str, Any]) -> set[tuple[str, str]]:
    """(Secret, key) for every secretKeyRef of the manifests and the Helm values."""
    refs = set()
    for container in k8s_containers(docs):
        for entry in container.spec.get("env", []):
            if (ref := _secret_ref(entry)) is not None:
                refs.add((ref["name"], ref["key"]))
    for entry in values.get("secret", []):
        refs.add((entry["secretName"], entry["secretKey"]))
    for entry in yaml.safe_load(values.get("extraEnv") or "[]"):
        if (ref := _secret_ref(entry)) is not None:
            refs.add((ref["name"], ref["key"]))
    data = values.get("data", {})
    for field_name, key in CHART_SECRET_KEYS.items():
        name = values.get(field_name) or data.get(field_name)
        if name:
            refs.add((name, key))
    return refs


def created_in_guide(guide: str) -> set[tuple[str, str]]:
    """(Secret, key) for every `kubectl create secret generic NAME --from-literal=KEY=...`."""
    joined = re.sub(r"\\\n\s*", " ", guide)
    created = set()
    for line in joined.splitlines():
        if match := re.search(r"create secret generic ([a-z0-9-]+)(.*)", line):
            for key in re.findall(r"--from-(?:literal|file)=([\w.-]+)=", match.group(2)):
                created.add((match.group(1), key))
    return created


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)
    elif isinstance(node, str):
        yield node


def required_compose_vars(compose: dict[str, Any]) -> set[str]:
    """Every variable compose refuses to start without (`${X:?message}`)."""
    return {
        var
        for text in _strings(compose)
        for var, form, _ in INTERPOLATION.findall(text)
        if form == ":?"
    }


def documented_env_example(text: str) -> dict[str, bool]:
    """Each variable of env.example, and whether a comment heads its block (blank-line
    separated lines), i.e. says what it is."""
    out = {}
    block_has_comment = False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            block_has_comment = False
        elif stripped.startswith("#"):
            block_has_comment = True
        elif "=" in stripped:
            out[stripped.split("=", 1)[0]] = block_has_comment
    return out


def secret_doc_problems(
    compose: dict[str, Any], docs: Docs, values: dict[str, Any], guide: str, env_example: str
) -> list[str]:
    problems = []
    example = documented_env_example(env_example)
    for var in sorted(required_compose_vars(compose)):
        if var not in example:
            problems.append(f"env.example lacks {var}")
        elif not example[var]:
            problems.append(f"env.example: {var} has no comment saying what it is")
        if f"`{var}`" not in guide:
            problems.append(f"docs/DEPLOY.md does not mention `{var}`")
    created = created_in_guide(guide)
    for name, key in sorted(referenced_k8s_secrets(docs, values) - created):
        problems.append(f"docs/DEPLOY.md never creates Secret {name} key {key}")
    return problems


def test_every_referenced_secret_is_documented_offline(
    compose: dict[str, Any], k8s_documents: Docs, helm_values: dict[str, Any]
) -> None:
    guide = DEPLOY_GUIDE.read_text(encoding="utf-8")
    env_example = ENV_EXAMPLE.read_text(encoding="utf-8")
    assert len(referenced_k8s_secrets(k8s_documents, helm_values)) >= 20
    assert {"RAY_AUTH_TOKEN", "TOOLRL_FRONTDOOR_API_KEY"} <= required_compose_vars(compose)
    problems = secret_doc_problems(compose, k8s_documents, helm_values, guide, env_example)
    assert not problems, "\n".join(problems)


def test_secret_documentation_check_catches_an_undocumented_secret_offline(
    compose: dict[str, Any], k8s_documents: Docs, helm_values: dict[str, Any]
) -> None:
    guide = DEPLOY_GUIDE.read_text(encoding="utf-8")
    guide = guide.replace("create secret generic toolrl-ray", "create secret generic toolrl-rey")
    env_example = ENV_EXAMPLE.read_text(encoding="utf-8").replace("MLFLOW_SERVING_PASSWORD=", "")
    docs = copy.deepcopy(k8s_documents)
    _container_env(docs, "Deployment", "toolrl-serving").append(
        {"name": "X_TOKEN", "valueFrom": {"secretKeyRef": {"name": "toolrl-new", "key": "k"}}}
    )
    broken_compose = copy.deepcopy(compose)
    _env(broken_compose["services"]["vllm"]).update(NEW_KEY="${TOOLRL_NEW_KEY:?set it}")
    problems = "\n".join(secret_doc_problems(broken_compose, docs, helm_values, guide, env_example))
    assert "never creates Secret toolrl-ray key auth-token" in problems
    assert "never creates Secret toolrl-new key k" in problems
    assert "env.example lacks MLFLOW_SERVING_PASSWORD" in problems
    assert "env.example lacks TOOLRL_NEW_KEY" in problems
    assert "does not mention `TOOLRL_NEW_KEY`" in problems


# --- NetworkPolicies: who may call what ------------------------------------------------------

NAMESPACE_LABELS = {
    "toolrl": {"kubernetes.io/metadata.name": "toolrl", "app.kubernetes.io/part-of": "toolrl"},
    "ingress-nginx": {"kubernetes.io/metadata.name": "ingress-nginx"},
    "default": {"kubernetes.io/metadata.name": "default"},
}
# The Airflow chart's pods (release `airflow`, as docs/DEPLOY.md installs it): the chart labels
# each with tier=airflow, component=<role>, release=<release name>.
AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer", "worker", "statsd")


@dataclass
class Pod:
    name: str
    namespace: str
    labels: dict[str, str]
    ports: dict[str, int] = field(default_factory=dict)  # container port name -> number


def cluster_pods(docs: Docs) -> list[Pod]:
    """The pods the manifests create (Ray pods with the labels KubeRay adds), the Airflow
    chart's pods, and outsiders: a pod of the namespace nobody lists, the ingress
    controller, and a pod in another namespace wearing an Airflow task pod's labels."""
    pods = []
    for _, doc in docs:
        spec, name = doc.get("spec", {}), doc["metadata"]["name"]
        templates: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        if doc["kind"] == "RayCluster":
            ray = {"ray.io/cluster": name, "ray.io/is-ray-node": "yes"}
            head = {**ray, "ray.io/node-type": "head", "ray.io/group": "headgroup"}
            templates.append(("ray-head", spec["headGroupSpec"]["template"], head))
            for group in spec["workerGroupSpecs"]:
                labels = {**ray, "ray.io/node-type": "worker", "ray.io/group": group["groupName"]}
                templates.append((f"ray-{group['groupName']}", group["template"], labels))
        elif "template" in spec:
            templates.append((name, spec["template"], {}))
        for pod_name, template, extra in templates:
            ports = {
                p.get("name", str(p["containerPort"])): p["containerPort"]
                for c in template["spec"]["containers"]
                for p in c.get("ports", [])
            }
            labels = {**template["metadata"].get("labels", {}), **extra}
            pods.append(Pod(pod_name, "toolrl", labels, ports))
    for component in AIRFLOW_COMPONENTS:
        labels = {"tier": "airflow", "component": component, "release": "airflow"}
        pods.append(Pod(f"airflow-{component}", "toolrl", labels, {"api": 8080}))
    pods.append(Pod("stranger", "toolrl", {"app": "debug-shell"}))
    pods.append(Pod("ingress", "ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"}))
    worker_labels = {"tier": "airflow", "component": "worker", "release": "airflow"}
    pods.append(Pod("airflow-lookalike", "default", worker_labels))
    return pods


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    selector = selector or {}
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, wanted = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        ok = {
            "In": present and labels.get(key) in (wanted or []),
            "NotIn": not present or labels.get(key) not in (wanted or []),
            "Exists": present,
            "DoesNotExist": not present,
        }[operator]
        if not ok:
            return False
    return True


def _peer_admits(peer: dict[str, Any], caller: Pod, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return False  # pod traffic is matched by labels here; ipBlock peers are refused below
    if "namespaceSelector" in peer:
        in_namespace = _selects(peer["namespaceSelector"], NAMESPACE_LABELS[caller.namespace])
    else:
        in_namespace = caller.namespace == policy_namespace
    return in_namespace and _selects(peer.get("podSelector"), caller.labels)


def _port_admits(ports: list[dict[str, Any]] | None, target: Pod, port: int) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != "TCP":
            continue
        wanted = entry.get("port")
        if wanted is None:
            return True
        number = target.ports.get(wanted) if isinstance(wanted, str) else wanted
        if number is not None and number <= port <= entry.get("endPort", number):
            return True
    return False


def admitted(policies: list[dict[str, Any]], caller: Pod, target: Pod, port: int) -> bool:
    """Kubernetes' NetworkPolicy ingress semantics: a pod no policy selects accepts all; a
    selected pod accepts what any rule of any selecting policy allows (rules are additive)."""
    selecting = [
        p
        for p in policies
        if p["metadata"].get("namespace", "toolrl") == target.namespace
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and _selects(p["spec"]["podSelector"], target.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        namespace = policy["metadata"].get("namespace", "toolrl")
        for rule in policy["spec"].get("ingress", []) or []:
            peers = rule.get("from")
            peer_ok = not peers or any(_peer_admits(p, caller, namespace) for p in peers)
            if peer_ok and _port_admits(rule.get("ports"), target, port):
                return True
    return False


RAY = {"ray-head", "ray-gpu"}
# The serving pods: vLLM on a GPU (50-serving.yaml) or the CPU engine (51-serving-cpu.yaml).
SERVING = {"toolrl-serving", "toolrl-serving-cpu"}
# Who may call what (docs/DEPLOY.md, "Who may call what"): (target pod, port) -> callers.
EXPECTED_CALLERS: dict[tuple[str, int], set[str]] = {
    ("mlflow", 5000): {"airflow-worker", *RAY, *SERVING, "mlflow-users"},
    ("ray-head", 8265): {"airflow-worker", "airflow-triggerer", *RAY},
    ("ray-head", 6379): RAY,
    ("ray-head", 10001): RAY,
    ("ray-gpu", 10002): RAY,  # a worker's node ports (object manager, worker processes)
    # the run's tools: rollouts on Ray, check_tools and the evaluation in Airflow's task pods
    ("toolrl-mcp-mock", 8000): {"airflow-worker", *RAY},
    ("toolrl-mcp-real", 8000): SERVING,
    ("toolrl-serving", 8000): {"ingress"},
    ("toolrl-serving", 8100): set(),  # vLLM's own port is never reachable (loopback anyway)
    ("toolrl-serving-cpu", 8000): {"ingress"},
    ("toolrl-serving-cpu", 8100): set(),  # nor the CPU engine's (loopback, a free port)
    ("airflow-api-server", 8080): {f"airflow-{c}" for c in AIRFLOW_COMPONENTS},
}


def policy_matrix(docs: Docs) -> dict[tuple[str, int], set[str]]:
    policies = [d for _, d in docs if d["kind"] == "NetworkPolicy"]
    pods = {pod.name: pod for pod in cluster_pods(docs)}
    return {
        (target, port): {
            name for name, caller in pods.items() if admitted(policies, caller, pods[target], port)
        }
        for target, port in EXPECTED_CALLERS
    }


def network_policy_problems(docs: Docs) -> list[str]:
    problems = []
    policies = [d for _, d in docs if d["kind"] == "NetworkPolicy"]
    baseline = [
        p
        for p in policies
        if p["spec"]["podSelector"] == {}
        and p["spec"].get("policyTypes") == ["Ingress"]
        and not p["spec"].get("ingress")
    ]
    if not baseline:
        problems.append("no default-deny ingress policy for the namespace")
    for policy in policies:
        for rule in policy["spec"].get("ingress", []) or []:
            if not rule.get("from"):
                problems.append(f"{policy['metadata']['name']}: a rule admits every source")
            if any("ipBlock" in peer for peer in rule.get("from") or []):
                problems.append(f"{policy['metadata']['name']}: ipBlock peers (use selectors)")
    for key, callers in policy_matrix(docs).items():
        expected = EXPECTED_CALLERS[key]
        if callers != expected:
            extra, missing = sorted(callers - expected), sorted(expected - callers)
            problems.append(f"{key[0]}:{key[1]} admits extra {extra}, misses {missing}")
    return problems


def test_network_policies_admit_exactly_the_documented_callers_offline(
    k8s_documents: Docs,
) -> None:
    problems = network_policy_problems(k8s_documents)
    assert not problems, "\n".join(problems)


def _policy(docs: Docs, name: str) -> dict[str, Any]:
    return _doc(docs, "NetworkPolicy", name)


def _drop_policy(docs: Docs, name: str) -> None:
    docs[:] = [
        (p, d) for p, d in docs if d["metadata"]["name"] != name or d["kind"] != "NetworkPolicy"
    ]


POLICY_BREAKS: dict[str, tuple[Callable[[Docs], None], str]] = {
    "no-default-deny": (
        lambda d: _drop_policy(d, "default-deny-ingress"),
        "no default-deny ingress policy",
    ),
    "mlflow-policy-gone": (
        lambda d: (_drop_policy(d, "mlflow-ingress"), _drop_policy(d, "default-deny-ingress")),
        "mlflow:5000 admits extra ['airflow-api-server'",
    ),
    "typo-in-a-caller-selector": (
        lambda d: _policy(d, "mcp-mock-ingress")["spec"]["ingress"][0]["from"][0]["podSelector"][
            "matchLabels"
        ].update({"ray.io/cluster": "toolr"}),
        "toolrl-mcp-mock:8000 admits extra [], misses ['ray-gpu', 'ray-head']",
    ),
    "allow-all-rule": (
        lambda d: _policy(d, "serving-ingress")["spec"]["ingress"].append({}),
        "serving-ingress: a rule admits every source",
    ),
    "any-namespace-for-airflow": (
        lambda d: _policy(d, "ray-head-jobs-api")["spec"]["ingress"][0]["from"][0].update(
            namespaceSelector={}
        ),
        "ray-head:8265 admits extra ['airflow-lookalike']",
    ),
    "wrong-port": (
        lambda d: _policy(d, "mlflow-ingress")["spec"]["ingress"][0]["ports"][0].update(port=5001),
        "mlflow:5000 admits extra [], misses",
    ),
    "ray-gcs-open-to-airflow": (
        lambda d: _policy(d, "ray-head-jobs-api")["spec"]["ingress"][0].pop("ports"),
        "ray-head:6379 admits extra ['airflow-triggerer', 'airflow-worker']",
    ),
}


@pytest.mark.parametrize("case", sorted(POLICY_BREAKS))
def test_network_policy_check_catches_a_broken_policy_offline(
    k8s_documents: Docs, case: str
) -> None:
    mutate, expected = POLICY_BREAKS[case]
    broken = copy.deepcopy(k8s_documents)
    mutate(broken)
    problems = "\n".join(network_policy_problems(broken))
    assert expected in problems, problems


def unguarded_services(docs: Docs) -> list[str]:
    """Control-plane Services (every Service here, and the head Service KubeRay creates) whose
    pods no NetworkPolicy with ingress rules selects."""
    policies = [d for _, d in docs if d["kind"] == "NetworkPolicy" and d["spec"].get("ingress")]
    pods = cluster_pods(docs)
    services = {
        d["metadata"]["name"]: d["spec"]["selector"] for _, d in docs if d["kind"] == "Service"
    }
    for _, doc in docs:
        if doc["kind"] == "RayCluster":
            head = {"ray.io/cluster": doc["metadata"]["name"], "ray.io/node-type": "head"}
            services[f"{doc['metadata']['name']}-head-svc"] = head
    problems = []
    for name, selector in services.items():
        backing = [
            p for p in pods if p.namespace == "toolrl" and selector.items() <= p.labels.items()
        ]
        if not backing:
            problems.append(f"Service {name} selects no pod")
        for pod in backing:
            if not any(_selects(p["spec"]["podSelector"], pod.labels) for p in policies):
                problems.append(f"Service {name}: no NetworkPolicy admits callers to {pod.name}")
    return problems


def test_every_control_plane_service_has_a_network_policy_offline(k8s_documents: Docs) -> None:
    names = {d["metadata"]["name"] for _, d in k8s_documents if d["kind"] == "Service"}
    assert {"mlflow", "toolrl-mcp-mock", "toolrl-mcp-real", *SERVING} <= names
    problems = unguarded_services(k8s_documents)
    assert not problems, "\n".join(problems)


def test_service_policy_check_catches_an_unguarded_service_offline(k8s_documents: Docs) -> None:
    broken = copy.deepcopy(k8s_documents)
    _drop_policy(broken, "mcp-real-ingress")
    _drop_policy(broken, "ray-head-jobs-api")
    _drop_policy(broken, "ray-cluster-internal")
    problems = "\n".join(unguarded_services(broken))
    assert "Service toolrl-mcp-real: no NetworkPolicy admits callers" in problems
    assert "Service toolrl-head-svc: no NetworkPolicy admits callers to ray-head" in problems
