"""The settings infra sets are exactly the ones the code reads, so the two cannot drift.

serving/settings.py registers every environment variable, Airflow connection and Variable the
code reads, and which deployed component reads it. This test collects what infra/ sets for each
component (compose `environment`, Kubernetes `env`/`envFrom` ConfigMaps/`secretKeyRef`, Helm
`env`/`secret`/`extraEnv`) and checks both directions:

* everything infra sets for a component is a key that component reads (or Airflow's own
  `AIRFLOW__SECTION__KEY` configuration), so a renamed or misspelt key fails here;
* every key a component requires is set for it, so a new required setting fails here until
  the deployment provides it.

It also scans the code for environment reads, connection ids and Variable keys outside the
registry, and checks that service URLs in the settings name services that exist.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from infra_files import REPO

from serving import settings

COMPONENTS = set(settings.DEPLOYED_COMPONENTS)
# Keys a component's container may carry that toolrl's code does not read, by component: the
# Airflow image is configured through AIRFLOW__SECTION__KEY variables, read by Airflow itself.
THIRD_PARTY_PATTERNS = {"airflow": re.compile(r"^AIRFLOW__[A-Z0-9_]+__[A-Z0-9_]+$")}

Found = dict[str, dict[str, set[str]]]  # component -> workload name -> env names


def _env_names(env: dict[str, Any] | list[Any] | None) -> set[str]:
    if env is None:
        return set()
    if isinstance(env, dict):
        return set(env)
    return {str(item).split("=", 1)[0] if isinstance(item, str) else item["name"] for item in env}


def collect_compose(compose: dict[str, Any]) -> Found:
    found: Found = {}
    for name, service in compose["services"].items():
        component = service.get("labels", {}).get("toolrl.component")
        assert component, f"compose service {name} has no toolrl.component label"
        if component in COMPONENTS:
            found.setdefault(component, {})[name] = _env_names(service.get("environment"))
    return found


def _pod_templates(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    spec = doc.get("spec", {})
    name = doc["metadata"]["name"]
    if doc["kind"] == "RayCluster":
        yield f"{name}-head", spec["headGroupSpec"]["template"]
        for group in spec["workerGroupSpecs"]:
            yield f"{name}-{group['groupName']}", group["template"]
    elif "template" in spec:
        yield name, spec["template"]


def collect_k8s(docs: list[tuple[Path, dict[str, Any]]]) -> Found:
    config_maps = {d["metadata"]["name"]: d for _, d in docs if d["kind"] == "ConfigMap"}
    found: Found = {}
    for _, doc in docs:
        for workload, template in _pod_templates(doc):
            component = template["metadata"].get("labels", {}).get("toolrl.io/component")
            assert component, f"pod template {workload} has no toolrl.io/component label"
            if component not in COMPONENTS:
                continue
            names: set[str] = set()
            for container in template["spec"]["containers"]:
                names |= _env_names(container.get("env"))
                for source in container.get("envFrom", []):
                    ref = source["configMapRef"]["name"]
                    assert ref in config_maps, f"{workload}: ConfigMap {ref} not in infra/k8s"
                    names |= set(config_maps[ref]["data"])
            found.setdefault(component, {})[workload] = names
    return found


def collect_helm(values: dict[str, Any]) -> Found:
    names = _env_names(values.get("env"))
    names |= {item["envName"] for item in values.get("secret", [])}
    names |= _env_names(yaml.safe_load(values.get("extraEnv") or "[]"))
    return {"airflow": {"airflow-chart": names}}


def _check_both_directions(source: str, found: Found) -> list[str]:
    problems = []
    for component, workloads in found.items():
        known = settings.keys_read_by(component)  # type: ignore[arg-type]
        required = settings.keys_read_by(component, required_only=True)  # type: ignore[arg-type]
        pattern = THIRD_PARTY_PATTERNS.get(component)
        for workload, names in workloads.items():
            unknown = {n for n in names - known if not (pattern and pattern.match(n))}
            if unknown:
                problems.append(
                    f"{source}/{workload} sets keys {component} never reads: {sorted(unknown)}"
                )
            if missing := required - names:
                problems.append(
                    f"{source}/{workload} lacks required {component} keys: {sorted(missing)}"
                )
    return problems


def test_compose_sets_exactly_the_keys_the_code_reads_offline(compose: dict[str, Any]) -> None:
    found = collect_compose(compose)
    assert set(found) == COMPONENTS, "compose runs every deployed component"
    assert not _check_both_directions("compose", found)


def test_k8s_and_helm_set_exactly_the_keys_the_code_reads_offline(
    k8s_documents: list[tuple[Path, dict[str, Any]]], helm_values: dict[str, Any]
) -> None:
    found = collect_k8s(k8s_documents) | collect_helm(helm_values)
    assert set(found) == COMPONENTS, "Kubernetes + Helm run every deployed component"
    problems = _check_both_directions("k8s", found)
    assert not problems, problems


def test_k8s_configmap_holds_only_registered_settings_offline(
    k8s_documents: list[tuple[Path, dict[str, Any]]],
) -> None:
    registered = {v.name for v in settings.ENV_VARS}
    for _, doc in k8s_documents:
        if doc["kind"] == "ConfigMap":
            assert set(doc["data"]) <= registered, set(doc["data"]) - registered


def test_drift_check_catches_a_renamed_and_a_missing_key_offline(compose: dict[str, Any]) -> None:
    """The check is only worth having if both directions fire."""
    found = collect_compose(compose)
    worker = found["ray"]["ray-gpu-worker"]
    worker.discard("TOOLRL_MCP_URL")
    worker.add("TOOLRL_MCP_ULR")
    problems = "\n".join(_check_both_directions("compose", found))
    assert "never reads: ['TOOLRL_MCP_ULR']" in problems
    assert "lacks required ray keys: ['TOOLRL_MCP_URL']" in problems


# --- service URLs point at services that exist -------------------------------------------


def _urls(value: str) -> list[str]:
    """HTTP URLs in a setting value: plain URLs, or the endpoint_url of a JSON connection."""
    if value.startswith("{"):
        extra = json.loads(value).get("extra", {})
        return [extra["endpoint_url"]] if "endpoint_url" in extra else []
    return [value] if value.startswith(("http://", "https://")) else []


# `${VAR:?message}` inside a URL (a password from .env) holds a `?` that urlsplit would take
# for the query: compose replaces it before the URL is used, so the check does too.
_INTERPOLATION = re.compile(r"\$\{[A-Z_][A-Z0-9_]*(?::?[-?][^}]*)?\}")


def test_compose_setting_urls_name_compose_services_offline(compose: dict[str, Any]) -> None:
    services = set(compose["services"])
    for name, service in compose["services"].items():
        env = service.get("environment") or {}
        for key, value in env.items():
            for url in _urls(_INTERPOLATION.sub("value", str(value))):
                host = urlsplit(url).hostname
                assert host in services, f"{name}: {key} points at unknown host {host}"


def test_k8s_setting_urls_name_k8s_services_offline(
    k8s_documents: list[tuple[Path, dict[str, Any]]], helm_values: dict[str, Any]
) -> None:
    services = {d["metadata"]["name"] for _, d in k8s_documents if d["kind"] == "Service"}
    # KubeRay creates the head Service as <cluster name>-head-svc.
    services |= {
        f"{d['metadata']['name']}-head-svc" for _, d in k8s_documents if d["kind"] == "RayCluster"
    }
    values: list[tuple[str, str]] = []
    for _, doc in k8s_documents:
        if doc["kind"] == "ConfigMap":
            values += [(k, str(v)) for k, v in doc["data"].items()]
        for _, template in _pod_templates(doc):
            for container in template["spec"]["containers"]:
                values += [
                    (e["name"], e["value"]) for e in container.get("env", []) if "value" in e
                ]
    values += [(e["name"], e["value"]) for e in helm_values.get("env", [])]
    checked = 0
    for key, value in values:
        for url in _urls(value):
            host = urlsplit(url).hostname or ""
            assert host.endswith(".toolrl.svc.cluster.local"), f"{key}: {host} not in namespace"
            assert host.split(".")[0] in services, f"{key}: no Service {host.split('.')[0]}"
            checked += 1
    assert checked >= 4, "the URL check found too few URLs to be meaningful"


# --- the code reads nothing outside the registry ------------------------------------------

CODE_DIRS = ("training", "serving", "plugins", "dags")
ENV_LIKE = re.compile(r"^(TOOLRL|RULER|MLFLOW|AWS|OPENAI|AIRFLOW_CONN|AIRFLOW_VAR)_[A-Z0-9_]+$")
# Reads found outside the registry when this test was written, each reported to the lead to be
# moved into serving/settings.py. The test fails when a new one appears, and also when one of
# these disappears (then delete it here), so the list can only shrink.
KNOWN_UNREGISTERED = {
    "training/rewards/config.py": {
        "RULER_JUDGE_MODEL",
        "RULER_MAX_SUB_BATCH",
        "RULER_CONCURRENT_CHUNKS",
        "RULER_MAX_COMPLETION_TOKENS",
        "RULER_BASE_URL",
        "OPENAI_BASE_URL",
        "RULER_API_KEY",
        "OPENAI_API_KEY",
        "RULER_JUDGE_WEIGHT",
        "RULER_TIMEOUT_S",
        "RULER_BACKOFF_S",
        "RULER_MAX_RETRIES",
    },
    # a handoff inside one training job, not a deployment setting: the job's entrypoint sets
    # it to the pack dataset's tools.json for the processes it starts (training/jobs/entry.py)
    "serving/toolcalls/registry.py": {"TOOLRL_TOOL_SNAPSHOT"},
    # a handoff inside one training job, not a deployment setting: the job driver sets it
    # when it restarts itself on 2 MiB pages, so that it never restarts twice
    "training/cpu_backend/huge_pages.py": {"TOOLRL_HUGE_PAGES_RESTARTED"},
    # set for the MLflow server process the embedded demo starts (7 job workers otherwise)
    "training/ops/demo/run.py": {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION"},
    # the environment of the MLflow server the demo starts with its basic-auth app: MLflow's
    # own variables, read by that server (infra sets them on the mlflow containers), not by
    # toolrl, so they are not toolrl settings
    "training/registry/auth.py": {
        "MLFLOW_AUTH_CONFIG_PATH",
        "MLFLOW_AUTH_ADMIN_USERNAME",
        "MLFLOW_AUTH_ADMIN_PASSWORD",
        "MLFLOW_FLASK_SERVER_SECRET_KEY",
    },
}


def _module_constants(tree: ast.Module) -> dict[str, str]:
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }


def _imported_constants(tree: ast.Module) -> dict[str, str]:
    """Constants imported with `from package.module import NAME` from this repository."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            path = REPO / (node.module.replace(".", "/") + ".py")
            if path.is_file():
                constants = _module_constants(ast.parse(path.read_text(encoding="utf-8")))
                for alias in node.names:
                    if alias.name in constants:
                        out[alias.asname or alias.name] = constants[alias.name]
    return out


def _is_env_read(call: ast.Call) -> bool:
    func = ast.unparse(call.func)
    return func in {"os.environ.get", "environ.get", "os.getenv", "getenv", "env.get"}


def scan_code(path: Path) -> tuple[set[str], set[str], set[str]]:
    """(env var names, connection ids, Variable keys) a source file reads."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = _imported_constants(tree) | _module_constants(tree)

    def resolve(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return constants.get(node.id) if isinstance(node, ast.Name) else None

    env: set[str] = set()
    conns: set[str] = set()
    variables: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if ENV_LIKE.match(node.value):
                env.add(node.value)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in {"os.environ"}:
            if name := resolve(node.slice):
                env.add(name)
        elif isinstance(node, ast.Call):
            name = resolve(node.args[0]) if _is_env_read(node) and node.args else None
            if name and ENV_LIKE.match(name):
                env.add(name)
            for keyword in node.keywords:
                conn = resolve(keyword.value) if (keyword.arg or "").endswith("conn_id") else None
                if conn:
                    conns.add(conn)
            is_variable_get = ast.unparse(node.func) == "Variable.get" and node.args
            if is_variable_get and (key := resolve(node.args[0])):
                variables.add(key)
    return env, conns, variables


def _code_files() -> Iterator[Path]:
    for directory in CODE_DIRS:
        for path in sorted((REPO / directory).rglob("*.py")):
            if path != REPO / "serving" / "settings.py":
                yield path


def test_code_reads_only_registered_settings_offline() -> None:
    registered_env = {v.name for v in settings.ENV_VARS}
    registered_env |= {c.env_var for c in settings.CONNECTIONS}
    registered_env |= {v.env_var for v in settings.VARIABLES}
    registered_conns = {c.conn_id for c in settings.CONNECTIONS}
    registered_vars = {v.key for v in settings.VARIABLES}
    problems = []
    seen_known: dict[str, set[str]] = {}
    for path in _code_files():
        relative = path.relative_to(REPO).as_posix()
        env, conns, variables = scan_code(path)
        known = KNOWN_UNREGISTERED.get(relative, set())
        seen_known[relative] = env & known
        if extra := env - registered_env - known:
            problems.append(f"{relative} reads unregistered env vars {sorted(extra)}")
        if extra := conns - registered_conns:
            problems.append(f"{relative} uses unregistered connection ids {sorted(extra)}")
        if extra := variables - registered_vars:
            problems.append(f"{relative} reads unregistered Variables {sorted(extra)}")
    for relative, names in KNOWN_UNREGISTERED.items():
        if stale := names - seen_known.get(relative, set()):
            problems.append(f"{relative} no longer reads {sorted(stale)}: drop from the list")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('import os\nos.environ.get("TOOLRL_NEW_KNOB")', ({"TOOLRL_NEW_KNOB"}, set(), set())),
        ('import os\nK = "MY_KEY"\nos.environ[K]', ({"MY_KEY"}, set(), set())),
        ('S3Hook(aws_conn_id="toolrl_s4")', (set(), {"toolrl_s4"}, set())),
        ('Variable.get("toolrl_spec")', (set(), set(), {"toolrl_spec"})),
    ],
)
def test_code_scan_finds_env_connection_and_variable_reads_offline(
    tmp_path: Path, source: str, expected: tuple[set[str], set[str], set[str]]
) -> None:
    path = tmp_path / "module.py"
    path.write_text(source, encoding="utf-8")
    assert scan_code(path) == expected


SHARED_VALUES = ("TOOLRL_S3_BUCKET", "TOOLRL_MODEL_NAME", "MLFLOW_TRACKING_URI")


def test_shared_settings_have_one_value_across_components_offline(
    compose: dict[str, Any],
    k8s_documents: list[tuple[Path, dict[str, Any]]],
    helm_values: dict[str, Any],
) -> None:
    """Airflow registers the model under the name serving loads, in the bucket training
    writes: a value that differs between components breaks the loop without any error."""
    k8s_values: dict[str, set[str]] = {}
    for _, doc in k8s_documents:
        if doc["kind"] == "ConfigMap":
            for key, value in doc["data"].items():
                k8s_values.setdefault(key, set()).add(str(value))
        for _, template in _pod_templates(doc):
            for container in template["spec"]["containers"]:
                for env in container.get("env", []):
                    if "value" in env:
                        k8s_values.setdefault(env["name"], set()).add(env["value"])
    for env in helm_values.get("env", []):
        k8s_values.setdefault(env["name"], set()).add(env["value"])
    compose_values: dict[str, set[str]] = {}
    for service in compose["services"].values():
        if service.get("labels", {}).get("toolrl.component") in COMPONENTS:
            for key, value in (service.get("environment") or {}).items():
                compose_values.setdefault(key, set()).add(str(value))
    for key in SHARED_VALUES:
        for source, values in (("k8s", k8s_values), ("compose", compose_values)):
            assert len(values.get(key, set())) <= 1, f"{source}: {key} = {values[key]}"


def test_deploy_guide_documents_every_registered_setting_offline() -> None:
    """A platform team configures from docs/DEPLOY.md: a key missing there is a key nobody sets."""
    guide = (REPO / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    names = [v.name for v in settings.ENV_VARS] + [c.conn_id for c in settings.CONNECTIONS]
    names += [v.key for v in settings.VARIABLES]
    missing = [name for name in names if f"`{name}`" not in guide]
    assert not missing, f"docs/DEPLOY.md does not mention {missing}"


# --- command-line flags infra passes exist in the CLI -------------------------------------


def _flags(args: list[str]) -> set[str]:
    return {arg.split("=", 1)[0] for arg in args if arg.startswith("--")}


def test_cli_flags_used_by_infra_exist_offline(
    compose: dict[str, Any], k8s_documents: list[tuple[Path, dict[str, Any]]]
) -> None:
    """The images' entrypoints are `toolrl mcp serve` and `toolrl serve` (the CPU training
    image, which has none, runs `toolrl serve` as its command); the flags compose and the
    Deployments pass them must be options of those commands."""
    import typer

    from training.cli import app

    deployments = {d["metadata"]["name"]: d for _, d in k8s_documents if d["kind"] == "Deployment"}

    def k8s_args(name: str) -> list[str]:
        container = deployments[name]["spec"]["template"]["spec"]["containers"][0]
        return [*container.get("command", []), *container["args"]]

    used = {
        ("mcp", "serve"): _flags(compose["services"]["mcp-mock"]["command"])
        | _flags(compose["services"]["mcp-real"]["command"])
        | _flags(k8s_args("toolrl-mcp-mock"))
        | _flags(k8s_args("toolrl-mcp-real")),
        ("serve",): _flags(compose["services"]["vllm"]["command"])
        | _flags(compose["services"]["serving-cpu"]["command"])
        | _flags(k8s_args("toolrl-serving"))
        | _flags(k8s_args("toolrl-serving-cpu")),
    }
    # typer may vendor its own click, so groups are recognised by their `commands` mapping
    # rather than by isinstance checks against the click package.
    root: Any = typer.main.get_command(app)
    missing_commands = []
    for path, flags in used.items():
        command: Any = root
        for part in path:
            command = getattr(command, "commands", {}).get(part)
            if command is None:
                break
        if command is None:
            missing_commands.append(" ".join(path))
            continue
        options = {opt for param in command.params for opt in param.opts}
        assert flags <= options, f"toolrl {' '.join(path)} lacks {sorted(flags - options)}"
    assert not missing_commands, f"infra runs toolrl commands the CLI lacks: {missing_commands}"


def test_infra_never_sets_per_job_settings_offline(
    compose: dict[str, Any], k8s_documents: list[tuple[Path, dict[str, Any]]]
) -> None:
    """Per-job keys (checkpoint prefix, ...) travel in each Ray job's runtime_env; set on the
    pods they would make every run share one value."""
    per_job = {v.name for v in settings.ENV_VARS if v.set_by == "job"}
    assert per_job, "the registry declares per-job keys"
    for found in (collect_compose(compose), collect_k8s(k8s_documents)):
        for workloads in found.values():
            for workload, names in workloads.items():
                assert not names & per_job, f"{workload} sets per-job keys {names & per_job}"
