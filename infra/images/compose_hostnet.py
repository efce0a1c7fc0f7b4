"""Write a host-network variant of infra/compose/compose.yaml for a machine that can pull no
image and must send no traffic to container bridge addresses (this project's CPU machines).

    python3 infra/images/compose_hostnet.py > /var/tmp/toolrl-compose.hostnet.yaml
    docker-compose -p toolrl -f /var/tmp/toolrl-compose.hostnet.yaml \
        --env-file infra/compose/.env --project-directory infra/compose up -d postgres ...

What changes, service by service (compose.yaml itself stays the deployable file):
- every service runs with `network_mode: host` and listens on 127.0.0.1 only; `ports` go
  (nothing to publish); the compose service names resolve to 127.0.0.1 through `extra_hosts`,
  so the URLs in the environment (postgres:5432, mlflow:5000, ...) stay as they are;
- ports that two services share on the host get their own: mcp-real 8100 (its published port),
  the serving endpoint 8300 (the `serving` and `serving-cpu` profiles alike), the Ray worker's
  agents next to the head's;
- postgres runs Debian's PostgreSQL 15 (toolrl/postgres:15-bookworm; compose.yaml: 17.6);
- MinIO and its init job are replaced by `s3-emulator` (moto's server, an in-memory EMULATOR:
  a restart loses every object) and `s3-emulator-init` (creates the buckets with boto3);
- Ray's GPU worker becomes `ray-cpu-worker` on the CPU training image, without the GPU
  reservation; the head runs the CPU image too, offering no CPU (`--num-cpus=0`), so the
  training job's driver, where the CPU backend trains, runs on the worker;
- every build gets the local base images as PYTHON_IMAGE / AIRFLOW_IMAGE build arguments.
The result goes to stdout; it is a build product, not committed.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "infra" / "compose" / "compose.yaml"

PYTHON_IMAGE = "toolrl/python:3.11-bookworm"
AIRFLOW_IMAGE = "toolrl/airflow:3.3.2-python3.11"
POSTGRES_IMAGE = "toolrl/postgres:15-bookworm"
S3_EMULATOR_IMAGE = "toolrl-s3-emulator:5.2"
TRAINING_CPU_IMAGE = "toolrl-training-cpu:0.1.0"
S3_URL_OLD, S3_URL_NEW = "http://minio:9000", "http://s3-emulator:9000"
# host-network ports of services that would otherwise share one
MCP_REAL_PORT = 8100
SERVING_PORT = 8300
SERVING_SERVICES = frozenset({"vllm", "serving-cpu"})

_BUCKETS_PY = (
    "import os, boto3; s3 = boto3.client('s3', endpoint_url='http://s3-emulator:9000', "
    "aws_access_key_id=os.environ['AWS_ACCESS_KEY_ID'], "
    "aws_secret_access_key=os.environ['AWS_SECRET_ACCESS_KEY'], region_name='us-east-1'); "
    "have = {b['Name'] for b in s3.list_buckets()['Buckets']}; "
    "[s3.create_bucket(Bucket=b) for b in ('mlflow', 'toolrl') if b not in have]"
)


def _swap(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_swap(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _swap(v, old, new) for k, v in value.items()}
    return value


def _loopback_args(command: list[str]) -> list[str]:
    out = []
    for arg in command:
        arg = re.sub(r"^--host=0\.0\.0\.0$", "--host=127.0.0.1", arg)
        arg = re.sub(r"^--dashboard-host=0\.0\.0\.0$", "--dashboard-host=127.0.0.1", arg)
        out.append("127.0.0.1" if arg == "0.0.0.0" else arg)  # noqa: S104 (rewritten away)
    return out


def _set_port(command: list[str], port: int) -> list[str]:
    out = list(command)
    if "--port" in out:
        out[out.index("--port") + 1] = str(port)
    return out


def _build_args(build: dict[str, Any]) -> dict[str, Any]:
    build = dict(build)
    dockerfile = build.get("dockerfile", "")
    args = dict(build.get("args") or {})
    args["PYTHON_IMAGE"] = PYTHON_IMAGE
    if dockerfile.endswith("airflow.Dockerfile"):
        args["AIRFLOW_IMAGE"] = AIRFLOW_IMAGE
    if dockerfile.endswith("training.Dockerfile"):
        build["dockerfile"] = "infra/docker/training-cpu.Dockerfile"
    build["args"] = args
    return build


def hostnet(compose: dict[str, Any]) -> dict[str, Any]:
    src = copy.deepcopy(compose)
    # docker-compose 1.29 (Debian's) rejects the top-level `name`: pass `-p toolrl` instead.
    src.pop("name", None)
    services: dict[str, Any] = src["services"]

    # S3: the emulator instead of MinIO and its init job.
    minio = services.pop("minio")
    services.pop("minio-init")
    services = {
        "s3-emulator": {
            "build": {"context": "../..", "dockerfile": "infra/docker/s3-emulator.Dockerfile"},
            "image": S3_EMULATOR_IMAGE,
            "labels": {
                "toolrl.component": "third-party",
                "toolrl.s3": "emulator: moto server, in memory, not MinIO",
            },
            "command": ["-H", "127.0.0.1", "-p", "9000"],
            "healthcheck": {
                "test": [
                    "CMD",
                    "python",
                    "-c",
                    "import urllib.request; urllib.request.urlopen("
                    "'http://127.0.0.1:9000/moto-api/', timeout=2)",
                ],
                "interval": "5s",
                "timeout": "3s",
                "retries": 10,
            },
            "restart": minio.get("restart", "unless-stopped"),
        },
        "s3-emulator-init": {
            "image": S3_EMULATOR_IMAGE,
            "labels": {"toolrl.component": "third-party", "toolrl.one-shot": "true"},
            "entrypoint": ["python", "-c", _BUCKETS_PY.replace("$", "$$")],
            "environment": {
                "AWS_ACCESS_KEY_ID": minio["environment"]["MINIO_ROOT_USER"],
                "AWS_SECRET_ACCESS_KEY": minio["environment"]["MINIO_ROOT_PASSWORD"],
            },
            "depends_on": {"s3-emulator": {"condition": "service_healthy"}},
            "restart": "no",
        },
        **services,
    }

    # Ray: the CPU image, and a CPU worker instead of the GPU one.
    gpu_worker = services.pop("ray-gpu-worker")
    worker = {k: v for k, v in gpu_worker.items() if k != "deploy"}
    worker["command"] = [
        "ray",
        "start",
        "--address=ray-head:6379",
        "--node-ip-address=127.0.0.1",
        # same network namespace as the head: its fixed-port agent moves off 52365
        "--dashboard-agent-listen-port=52366",
        "--block",
    ]
    worker["shm_size"] = "2gb"
    worker["healthcheck"] = _swap(worker["healthcheck"], "ray-head:6379", "127.0.0.1:6379")
    services["ray-cpu-worker"] = worker
    services["ray-head"]["command"] = [*_loopback_args(services["ray-head"]["command"])]
    services["ray-head"]["command"].insert(-1, "--node-ip-address=127.0.0.1")
    # The CPU backend trains inside the job's driver: with no CPU to offer on the head, the
    # driver (entrypoint_num_cpus=1) is placed on the worker, as the GPU stack's actors are.
    services["ray-head"]["command"].insert(-1, "--num-cpus=0")
    services["ray-head"]["shm_size"] = "2gb"

    # The serving profiles (vllm: no vLLM image on CPU machines; serving-cpu: runs here) share
    # one host port; only one profile is brought up at a time.
    for name in SERVING_SERVICES & set(services):
        services[name]["command"] = _set_port(
            _loopback_args(services[name]["command"]), SERVING_PORT
        )

    names = sorted(services)
    for _name, service in services.items():
        service.pop("ports", None)
        service.pop("networks", None)
        service["network_mode"] = "host"
        service["extra_hosts"] = [f"{n}:127.0.0.1" for n in names]
        if "build" in service:
            service["build"] = _build_args(service["build"])
        if service.get("image", "").startswith("toolrl-training:"):
            service["image"] = TRAINING_CPU_IMAGE
        if isinstance(service.get("command"), list):
            service["command"] = _loopback_args(service["command"])
        if isinstance(service.get("depends_on"), dict):
            deps = service["depends_on"]
            renamed = {
                "minio": "s3-emulator",
                "minio-init": "s3-emulator-init",
                "ray-gpu-worker": "ray-cpu-worker",
            }
            service["depends_on"] = {renamed.get(k, k): v for k, v in deps.items()}
        if "environment" in service:
            env = _swap(service["environment"], S3_URL_OLD, S3_URL_NEW)
            env = _swap(env, "mcp-real:8000", f"mcp-real:{MCP_REAL_PORT}")
            service["environment"] = env

    services["postgres"]["image"] = POSTGRES_IMAGE
    services["postgres"]["environment"]["POSTGRES_LISTEN_ADDRESSES"] = "127.0.0.1"
    services["mcp-real"]["command"] = _set_port(services["mcp-real"]["command"], MCP_REAL_PORT)
    services["mcp-real"]["healthcheck"] = _swap(
        services["mcp-real"]["healthcheck"], "127.0.0.1:8000", f"127.0.0.1:{MCP_REAL_PORT}"
    )
    for name in SERVING_SERVICES & set(services):
        services[name]["healthcheck"] = _swap(
            services[name]["healthcheck"], "127.0.0.1:8000", f"127.0.0.1:{SERVING_PORT}"
        )
    api = services.get("airflow-apiserver")
    if api is not None:
        api["command"] = [*api["command"], "--host", "127.0.0.1"]
    for service in services.values():
        env = service.get("environment")
        if isinstance(env, dict) and "AIRFLOW__CORE__EXECUTOR" in env:
            env["AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST"] = "127.0.0.1"

    src["services"] = services
    volumes = dict(src.get("volumes") or {})
    volumes.pop("minio-data", None)
    src["volumes"] = volumes
    return src


def main() -> int:
    compose = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    out = hostnet(compose)
    sys.stdout.write(
        "# GENERATED by infra/images/compose_hostnet.py from infra/compose/compose.yaml:\n"
    )
    sys.stdout.write("# host networking, loopback only, local base images, S3 EMULATOR (moto).\n")
    yaml.safe_dump(out, sys.stdout, sort_keys=False, width=200)
    return 0


if __name__ == "__main__":
    sys.exit(main())
