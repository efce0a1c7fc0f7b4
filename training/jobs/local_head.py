"""The command line of a Ray head on one machine (the demo's, the tests'), on loopback.

Why every port is chosen: Ray's defaults (dashboard agent 52365, Ray client 10001, ...) are
fixed, so a second head on the same machine (a test module's own head beside the session's,
a benchmark beside a demo) starts but its job agent cannot bind, and every submission then
fails with "No available agent to submit job". Free ports for all of them keep heads apart.
"""

from __future__ import annotations

from pathlib import Path

from serving.runtime.ports import free_port


def head_command(
    ray_bin: Path, gcs_port: int, dashboard_port: int, temp_dir: Path, num_cpus: int = 2
) -> list[str]:
    """`ray start --head --block` with the Jobs API on `dashboard_port`, nothing on Ray's
    fixed default ports, and `temp_dir` (keep it short: Ray's socket paths are capped)."""
    return [
        str(ray_bin),
        "start",
        "--head",
        "--block",
        f"--port={gcs_port}",
        "--node-ip-address=127.0.0.1",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--ray-client-server-port={free_port()}",
        f"--num-cpus={num_cpus}",
        "--include-dashboard=true",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]
