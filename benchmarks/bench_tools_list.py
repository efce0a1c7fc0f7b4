"""Benchmark: `toolrl tools list` against both third-party servers (target: under 5 s).

What a user waits for is a fresh process: interpreter start, the CLI's imports, both stdio
servers started (mcp-server-time from the byo-mcp extra, @modelcontextprotocol/server-memory
from `make mcp-servers`; concurrently), their handshakes, `tools/list`, schema validation,
the merge, and both servers stopped. Each run is a new `toolrl` process (`--runs`, median
reported). The baseline, measured in the same minutes, is `toolrl --help` in a new process:
start-up cost every command pays, so the ratio says what listing adds on this machine.

Writes benchmarks/results/tools_list.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "tools_list.json"
MEMORY_BIN = ROOT / "third_party" / "mcp-servers" / "node_modules" / ".bin" / "mcp-server-memory"
TARGET_S = 5.0


def wall(command: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not MEMORY_BIN.exists():
        raise SystemExit("server-memory is not installed: run `make mcp-servers`")

    with tempfile.TemporaryDirectory() as tmp:
        sources = Path(tmp) / "sources.yaml"
        servers = {
            "time": {"command": "mcp-server-time"},
            "memory": {
                "command": str(MEMORY_BIN),
                "env": {"MEMORY_FILE_PATH": str(Path(tmp) / "memory.jsonl")},
            },
        }
        sources.write_text(yaml.safe_dump({"servers": servers}))
        cli = [sys.executable, "-m", "training.cli"]
        baseline = [wall([*cli, "--help"])[0] for _ in range(args.runs)]
        runs, listed = [], ""
        for _ in range(args.runs):
            seconds, listed = wall([*cli, "tools", "list", "--sources", str(sources), "--json"])
            runs.append(seconds)
    catalog: dict[str, Any] = json.loads(listed)
    median = statistics.median(runs)
    result = {
        "target_s": TARGET_S,
        "command": "toolrl tools list --sources SOURCES --json (time + memory, stdio)",
        "runs_s": [round(t, 2) for t in runs],
        "median_s": round(median, 2),
        "under_target": median < TARGET_S,
        "cli_start_baseline_s": round(statistics.median(baseline), 2),
        "ratio_to_cli_start": round(median / statistics.median(baseline), 2),
        "servers": catalog["servers"],
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_1m_after": round(os.getloadavg()[0], 2),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"tools list: median {median:.2f} s (target {TARGET_S:.0f} s)")


if __name__ == "__main__":
    main()
