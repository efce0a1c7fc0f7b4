"""Bring up the part of toolrl's stack whose images are built, on this machine, with host
networking and loopback ports only, and time each service to healthy.

    python3 benchmarks/stack_up.py [--down] [--keep]
    python3 benchmarks/stack_up.py --record-build /var/tmp/toolrl-build-timings.tsv
    python3 benchmarks/stack_up.py --compose infra/compose/.env   # whole stack, docker-compose
    python3 benchmarks/stack_up.py --write-env /var/tmp/toolrl.env \
        --env TOOLRL_TRAINING_SPEC=training/specs/cpu_tiny.yaml   # .env with fresh secrets

Images come from infra/images/build-local-base.sh (run that first). Every container runs with
`--network host` and listens on 127.0.0.1 only; the compose service names the images expect
(postgres, minio, mlflow, mcp-mock, ray-head) are mapped to 127.0.0.1 with --add-host, so the
same URLs as in infra/compose/compose.yaml work. No traffic goes to the docker0 bridge.
The S3 endpoint is moto's server (toolrl-s3-emulator), an in-memory EMULATOR, not MinIO.

Secrets are generated for the run and kept in memory only. The figures are merged into
benchmarks/results/stack.json under "up" (build figures stay under "build").
Without --keep the containers are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "stack.json"
DOCKER = (
    "/usr/bin/docker" if Path("/usr/bin/docker").exists() else (shutil.which("docker") or "docker")
)
PREFIX = "toolrl-local-"
HOSTS = ["postgres", "minio", "mlflow", "mcp-mock", "mcp-real", "ray-head"]
ADD_HOSTS = [f"--add-host={h}:127.0.0.1" for h in HOSTS]


def docker(
    *args: str, check: bool = True, capture: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], check=check, text=True, capture_output=capture)


def image_exists(ref: str) -> bool:
    return docker("image", "inspect", ref, check=False).returncode == 0


def run(
    name: str,
    image: str,
    *args: str,
    env: dict[str, str] | None = None,
    entrypoint: str | None = None,
    detach: bool = True,
    extra: list[str] | None = None,
) -> None:
    cmd = ["run", "--name", PREFIX + name, "--network", "host", *ADD_HOSTS]
    if detach:
        cmd.append("-d")
    else:
        cmd.append("--rm")
    for key, value in (env or {}).items():
        cmd += ["-e", f"{key}={value}"]
    if entrypoint is not None:
        cmd += ["--entrypoint", entrypoint]
    cmd += [*(extra or []), image, *args]
    docker(*cmd)


def wait(check: Callable[[], bool], timeout_s: float, period_s: float = 0.5) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            if check():
                return True
        except Exception:
            pass
        time.sleep(period_s)
    return False


def http_code(url: str, user: str | None = None) -> str:
    """The HTTP status curl gets for `url` (with basic auth `user:password` when given)."""
    auth = ["-u", user] if user else []
    command = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", *auth, url]
    return subprocess.run(command, text=True, capture_output=True, check=False).stdout


def http_ok(url: str, headers: dict[str, str] | None = None) -> bool:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=3) as response:
        return 200 <= int(response.status) < 300


def exec_ok(name: str, *cmd: str) -> bool:
    return docker("exec", PREFIX + name, *cmd, check=False).returncode == 0


def down() -> None:
    names = docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    for name in names:
        if name.startswith(PREFIX):
            docker("rm", "-f", name, check=False)


def logs_tail(name: str, lines: int = 20) -> str:
    out = docker("logs", "--tail", str(lines), PREFIX + name, check=False)
    return (out.stdout + out.stderr)[-3000:]


def up() -> dict[str, Any]:
    pg_pw, admin_pw = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    pipe_pw, serve_pw = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    s3_key, s3_secret = "toolrl-local", secrets.token_urlsafe(18)
    ray_token, mcp_token = secrets.token_hex(32), secrets.token_urlsafe(24)
    services: dict[str, Any] = {}
    t_all = time.monotonic()

    def record(name: str, started: float, healthy: bool, note: str = "") -> None:
        services[name] = {
            "time_to_healthy_s": round(time.monotonic() - started, 1) if healthy else None,
            "healthy": healthy,
        }
        if note:
            services[name]["note"] = note
        if not healthy:
            services[name]["log_tail"] = logs_tail(name)
        print(name, services[name], flush=True)

    # PostgreSQL (Debian's 15) with the compose init script, on 127.0.0.1:5432.
    if image_exists("toolrl/postgres:15-bookworm"):
        t0 = time.monotonic()
        run(
            "postgres",
            "toolrl/postgres:15-bookworm",
            env={
                "POSTGRES_USER": "postgres",
                "POSTGRES_PASSWORD": pg_pw,
                "APP_DB_PASSWORD": pg_pw,
                "POSTGRES_LISTEN_ADDRESSES": "127.0.0.1",
            },
            extra=[
                "-v",
                f"{REPO}/infra/compose/postgres-init.sh:/docker-entrypoint-initdb.d/10-toolrl.sh:ro",
            ],
        )
        # Ready only after the init scripts ran (the first start's server listens on no TCP port).
        ok = wait(
            lambda: exec_ok("postgres", "pg_isready", "-h", "127.0.0.1", "-U", "postgres"), 120
        )
        record("postgres", t0, ok, "Debian PostgreSQL 15 (compose default: postgres:17.6)")

    # S3 emulator (moto) on 127.0.0.1:9000, reached as http://minio:9000 like in compose.
    if image_exists("toolrl-s3-emulator:5.2"):
        t0 = time.monotonic()
        run("s3-emulator", "toolrl-s3-emulator:5.2", "-H", "127.0.0.1", "-p", "9000")
        ok = wait(lambda: http_ok("http://127.0.0.1:9000/moto-api/"), 60)
        if ok:  # the buckets minio-init creates
            make = (
                "import boto3; s3 = boto3.client('s3', endpoint_url='http://minio:9000', "
                "aws_access_key_id='k', aws_secret_access_key='s', region_name='us-east-1'); "
                "[s3.create_bucket(Bucket=b) for b in ('mlflow', 'toolrl')]; "
                "print(s3.list_buckets()['Buckets'])"
            )
            out = docker("exec", PREFIX + "s3-emulator", "python", "-c", make, check=False)
            ok = out.returncode == 0
        record("s3-emulator", t0, ok, "moto server: in-memory S3 emulator, not MinIO")

    # MLflow with its basic-auth app, Postgres backend, artifacts proxied to s3://mlflow.
    if image_exists("toolrl-mlflow:3.17.2") and services.get("postgres", {}).get("healthy"):
        t0 = time.monotonic()
        pg = f"postgresql+psycopg2://mlflow:{pg_pw}@postgres:5432"
        s3_env = {
            "MLFLOW_S3_ENDPOINT_URL": "http://minio:9000",
            "AWS_ACCESS_KEY_ID": s3_key,
            "AWS_SECRET_ACCESS_KEY": s3_secret,
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        run(
            "mlflow",
            "toolrl-mlflow:3.17.2",
            "--app-name=basic-auth",
            f"--backend-store-uri={pg}/mlflow",
            "--artifacts-destination=s3://mlflow",
            "--host=127.0.0.1",
            "--port=5000",
            "--workers=2",
            "--allowed-hosts=mlflow,mlflow:5000,localhost,localhost:5000,127.0.0.1:5000",
            env={
                "MLFLOW_AUTH_CONFIG_PATH": "/tmp/mlflow-auth/basic_auth.ini",
                "MLFLOW_AUTH_DATABASE_URI": f"{pg}/mlflow_auth",
                "MLFLOW_AUTH_ADMIN_USERNAME": "toolrl-admin",
                "MLFLOW_AUTH_ADMIN_PASSWORD": admin_pw,
                "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(32),
                **s3_env,
            },
        )
        ok = wait(lambda: http_ok("http://127.0.0.1:5000/health"), 240)
        record("mlflow", t0, ok)
        if ok:
            t0 = time.monotonic()
            out = docker(
                "run",
                "--rm",
                "--network",
                "host",
                *ADD_HOSTS,
                "-e",
                "MLFLOW_AUTH_ADMIN_USERNAME=toolrl-admin",
                "-e",
                f"MLFLOW_AUTH_ADMIN_PASSWORD={admin_pw}",
                "-e",
                f"MLFLOW_PIPELINE_PASSWORD={pipe_pw}",
                "-e",
                f"MLFLOW_SERVING_PASSWORD={serve_pw}",
                "--entrypoint",
                "toolrl-mlflow",
                "toolrl-mlflow:3.17.2",
                "create-users",
                "http://mlflow:5000",
                check=False,
            )
            services["mlflow-users"] = {
                "seconds": round(time.monotonic() - t0, 1),
                "exit_code": out.returncode,
                "output_tail": (out.stdout + out.stderr)[-1500:],
            }
            print("mlflow-users", services["mlflow-users"], flush=True)
            # The auth app refuses anonymous requests and accepts the pipeline identity.
            search = "http://127.0.0.1:5000/api/2.0/mlflow/experiments/search?max_results=1"
            anon = http_code(search)
            authed = http_code(search, f"toolrl-pipeline:{pipe_pw}")
            services["mlflow"]["auth_check"] = {
                "anonymous_http": anon,
                "toolrl_pipeline_http": authed,
            }

    # MCP tool server, mock mode, on 127.0.0.1:8000.
    if image_exists("toolrl-mcp:0.1.0"):
        t0 = time.monotonic()
        run(
            "mcp-mock",
            "toolrl-mcp:0.1.0",
            "--mode",
            "mock",
            "--host",
            "127.0.0.1",
            "--port",
            "8000",
            env={"TOOLRL_MCP_TOKEN": mcp_token},
        )
        ok = wait(lambda: http_ok("http://127.0.0.1:8000/healthz"), 90)
        record("mcp-mock", t0, ok)

    # Ray head and one Ray worker as separate containers (CPU training image), token auth.
    if image_exists("toolrl-training-cpu:0.1.0"):
        ray_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": ray_token}
        t0 = time.monotonic()
        run(
            "ray-head",
            "toolrl-training-cpu:0.1.0",
            "ray",
            "start",
            "--head",
            "--port=6379",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            "--num-gpus=0",
            "--num-cpus=1",
            "--block",
            env=ray_env,
            extra=["--shm-size=1g"],
        )
        hdr = {"Authorization": f"Bearer {ray_token}"}
        ok = wait(lambda: http_ok("http://127.0.0.1:8265/api/version", hdr), 180)
        record("ray-head", t0, ok)
        if ok:
            # Same network namespace as the head: the worker's fixed-port agents are moved off
            # the head's defaults (52365 dashboard agent, runtime-env agent, metrics).
            t0 = time.monotonic()
            run(
                "ray-worker",
                "toolrl-training-cpu:0.1.0",
                "ray",
                "start",
                "--address=ray-head:6379",
                "--node-ip-address=127.0.0.1",
                "--num-cpus=1",
                "--dashboard-agent-listen-port=52366",
                "--block",
                env=ray_env,
                extra=["--shm-size=1g"],
            )

            def two_nodes() -> bool:
                with urllib.request.urlopen(
                    urllib.request.Request("http://127.0.0.1:8265/nodes?view=summary", headers=hdr),
                    timeout=3,
                ) as r:
                    body = json.load(r)
                summary = body.get("data", {}).get("summary", [])
                return sum(1 for n in summary if n.get("raylet", {}).get("state") == "ALIVE") >= 2

            ok = wait(two_nodes, 180, 1.0)
            record("ray-worker", t0, ok, "joined: 2 ALIVE nodes in the head's /nodes")

    return {
        "services": services,
        "total_s": round(time.monotonic() - t_all, 1),
        "network": "host networking, every port on 127.0.0.1; service names via --add-host",
    }


IMAGES = {  # tag -> what it is
    "toolrl/debian-base:bookworm": "debootstrap --variant=minbase bookworm, docker import",
    "toolrl/python:3.11-bookworm": "Debian python3.11 (3.11.2) + venv, pip 25.2",
    "toolrl/postgres:15-bookworm": "Debian PostgreSQL 15, official-image entrypoint contract",
    "toolrl/airflow:3.3.2-python3.11": "apache-airflow[postgres]==3.3.2 as user airflow",
    "toolrl-training-cpu:0.1.0": "CPU torch 2.13.0+cpu, TRL CPU backend, verl, ray[default]",
    "toolrl-mlflow:3.17.2": "mlflow[auth] 3.17.2, psycopg2, boto3",
    "toolrl-s3-emulator:5.2": "moto[server]: in-memory S3 EMULATOR, not MinIO",
    "toolrl-mcp:0.1.0": "toolrl core + MCP server",
    "toolrl-airflow:0.1.0": "Airflow 3.3.2 + toolrl[orchestration]",
}


def record_build(timings: Path) -> dict[str, Any]:
    steps = []
    for line in timings.read_text().splitlines():
        name, seconds, rc = line.split("\t")
        steps.append({"step": name, "seconds": float(seconds), "exit_code": int(rc)})
    images = {}
    for tag, what in IMAGES.items():
        out = docker("image", "inspect", tag, "--format", "{{.Size}}", check=False)
        if out.returncode == 0:
            size = int(out.stdout.strip())
            images[tag] = {"bytes": size, "gb": round(size / 1e9, 2), "what": what}
    return {
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "steps": steps,
        "images": images,
    }


GENERATED = Path("/var/tmp/toolrl-compose.hostnet.yaml")


def compose_cmd(env_file: Path) -> list[str]:
    """docker-compose on the host-network variant of compose.yaml (written to GENERATED),
    project `toolrl` (containers toolrl_<service>_1)."""
    text = subprocess.run(
        [sys.executable, str(REPO / "infra/images/compose_hostnet.py")],
        check=True,
        text=True,
        capture_output=True,
    ).stdout
    GENERATED.write_text(text)
    return [
        "docker-compose",
        "-p",
        "toolrl",
        "-f",
        str(GENERATED),
        "--env-file",
        str(env_file),
        "--project-directory",
        str(REPO / "infra/compose"),
    ]


def compose_up(env_file: Path, timeout_s: float = 900) -> dict[str, Any]:
    """The whole default profile of compose.yaml, as its host-network variant, with docker-compose:
    time from `up -d` to each container's health check passing (one-shots: exit 0)."""
    dc = compose_cmd(env_file)
    subprocess.run([*dc, "down", "-v", "--remove-orphans"], check=False, capture_output=True)
    t0 = time.monotonic()
    up_proc = subprocess.Popen(
        [*dc, "up", "-d", "--no-build"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    done: dict[str, Any] = {}
    while time.monotonic() - t0 < timeout_s:
        ids = docker(
            "ps",
            "-a",
            "--filter",
            "label=com.docker.compose.project=toolrl",
            "--format",
            "{{.ID}}",
            check=False,
        ).stdout.split()
        for cid in ids:
            info = json.loads(docker("inspect", cid, check=False).stdout or "[]")
            if not info:
                continue
            c = info[0]
            name = c["Config"]["Labels"].get("com.docker.compose.service", c["Name"])
            if name in done:
                continue
            state = c["State"]
            health = (state.get("Health") or {}).get("Status")
            one_shot = c["Config"]["Labels"].get("toolrl.one-shot") == "true"
            if one_shot and state["Status"] == "exited":
                done[name] = {
                    "seconds_from_up": round(time.monotonic() - t0, 1),
                    "exit_code": state["ExitCode"],
                }
            elif health == "healthy":
                done[name] = {"time_to_healthy_s_from_up": round(time.monotonic() - t0, 1)}
            elif health == "unhealthy" or (not one_shot and state["Status"] == "exited"):
                done[name] = {
                    "failed": health or state["Status"],
                    "exit_code": state["ExitCode"],
                    "log_tail": docker("logs", "--tail", "15", cid, check=False).stderr[-2000:],
                }
            if name in done:
                print(name, done[name], flush=True)
        expected = set(yaml_services(GENERATED))
        if expected <= set(done):
            break
        time.sleep(2)
    up_out = up_proc.communicate(timeout=60)[0] if up_proc.poll() is not None else "(still running)"
    return {
        "services": done,
        "total_s": round(time.monotonic() - t0, 1),
        "not_done": sorted(set(yaml_services(GENERATED)) - set(done)),
        "compose_output_tail": up_out[-2000:],
        "how": "docker-compose 1.29 -p toolrl -f <compose_hostnet.py output> up -d --no-build",
    }


#: env.example keys whose empty value is a secret to generate, and how.
_GENERATED = {"AIRFLOW_FERNET_KEY": "fernet"}
#: env.example keys whose empty value means "unset" (never a generated secret).
_NOT_SECRET = (
    "TOOLRL_JUDGE_URL",
    "TOOLRL_JUDGE_MODEL",
    "TOOLRL_JUDGE_API_KEY",
    "TOOLRL_TRAINING_SPEC",
    "TOOLRL_GATE_THRESHOLDS",
)


def write_env(out: Path, overrides: list[str]) -> Path:
    """infra/compose/env.example with every empty secret filled by a fresh random value
    (the Fernet key in its own format) and `KEY=VALUE` overrides applied; mode 0600."""
    import base64
    import os

    values = dict(item.split("=", 1) for item in overrides)
    lines = []
    for line in (REPO / "infra/compose/env.example").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            if key in values:
                value = values.pop(key)
            elif not value and key not in _NOT_SECRET:
                value = (
                    base64.urlsafe_b64encode(os.urandom(32)).decode()
                    if _GENERATED.get(key) == "fernet"
                    else secrets.token_hex(24)
                )
            line = f"{key}={value}"
        lines.append(line)
    if values:
        raise SystemExit(f"not keys of env.example: {', '.join(sorted(values))}")
    out.write_text("\n".join(lines) + "\n")
    out.chmod(0o600)
    return out


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def save(key: str, value: dict[str, Any]) -> None:
    """Put `value` under `key` in stack.json; every other key stays as it was."""
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[key] = value
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")


def merged_build(timings: Path) -> dict[str, Any]:
    """record_build(timings), keeping the recorded steps this build did not run."""
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    build = record_build(timings)
    previous = {s["step"]: s for s in data.get("build", {}).get("steps", [])}
    previous.update({s["step"]: s for s in build["steps"]})
    build["steps"] = list(previous.values())
    return build


def yaml_services(path: Path) -> list[str]:
    """The services `up` starts: those of the default profile (none of `profiles:`)."""
    import yaml

    services = yaml.safe_load(path.read_text())["services"]
    return [name for name, service in services.items() if not service.get("profiles")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--down", action="store_true", help="remove the containers and exit")
    parser.add_argument("--keep", action="store_true", help="leave the containers running")
    parser.add_argument(
        "--record-build",
        type=Path,
        metavar="TIMINGS_TSV",
        help="merge build-local-base.sh's timings and the image sizes, then exit",
    )
    parser.add_argument(
        "--compose",
        type=Path,
        metavar="ENV_FILE",
        help="bring the whole default profile up with docker-compose (host network)",
    )
    parser.add_argument(
        "--write-env",
        type=Path,
        metavar="ENV_FILE",
        help="write env.example with generated secrets there (mode 0600), then exit",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --write-env: set a key (repeatable)",
    )
    ns = parser.parse_args()
    if ns.write_env:
        print(f"wrote {write_env(ns.write_env, ns.env)}")
        return 0
    if ns.compose:
        result = compose_up(ns.compose)
        save("compose_up", {"measured_at_utc": now_utc(), **result})
        print(json.dumps({k: v for k, v in result.items() if k != "services"}, indent=2))
        return 0 if not result["not_done"] else 1
    if ns.record_build:
        build = merged_build(ns.record_build)
        save("build", build)
        print(json.dumps(build, indent=2))
        return 0
    if ns.down:
        down()
        return 0
    down()
    try:
        result = up()
    finally:
        if not ns.keep:
            down()
    save("up", {"measured_at_utc": now_utc(), **result})
    print(json.dumps(result, indent=2))
    return 0 if all(s.get("healthy", True) for s in result["services"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
