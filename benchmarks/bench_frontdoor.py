"""Benchmark: the front door under load, on the demo's champion served by the CPU engine.

What a platform engineer asks before pointing clients at the endpoint: how many requests a
second it holds, how long until the first token and the whole reply, whether anything
fails, and what a champion reload mid-traffic costs. Setup, all on loopback: an MLflow
server over a *copy* of the demo's registry (`runs/demo/mlflow`, so the demo is untouched),
the real-mode MCP server, and `toolrl serve --backend cpu` (engine server + front door,
champion watch every 2 s). Each of `--clients` streaming clients asks the demo question in
a loop (the episode: the model calls `get_current_weather`, the real tool runs, the model
answers) for `--seconds`:

1. steady load;
2. the same load with a new champion promoted halfway (a second registered version of the
   same weights): blue/green reload, the old backend drained;

The front door's own cost is measured in the same requests, against the model server: each
reply's `toolrl.timings` says how long the episode waited on the model and the tools, so
`client latency - model_s - tools_s` is what the front door and the agent loop add; the
overhead target is read in the steady run. The answer streams token by token, so time to
first token is the first content delta. A third phase, for comparison, runs the front door
alone over the scripted model server (instant answers, same episode shape, real MCP tool):
there the front door itself is the bottleneck, 32 clients deep.

Prints the figures and writes benchmarks/results/frontdoor.json. Run alone (2 cores), after
`make demo`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "frontdoor.json"
QUESTION = "What's the weather like in Paris right now?"
OVERHEAD_TARGET_MS = 5.0
SCRIPTED = (sys.executable, "-m", "training.evaluation.scripted")


@dataclass
class Sample:
    started: float
    first_token_s: float | None = None
    total_s: float | None = None
    error: str | None = None
    model_s: float = 0.0
    tools_s: float = 0.0
    episode_s: float = 0.0
    door_s: float = 0.0
    """Time in the front door up to its finish chunk (the trace's `door_s`)."""


@dataclass
class Load:
    samples: list[Sample] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def one_request(http: Any, url: str, model: str, question: str = QUESTION) -> Sample:
    """One streamed chat; first token = the first content delta of the answer."""
    sample = Sample(started=time.perf_counter())
    body = {
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    try:
        async with http.post(f"{url}/chat/completions", json=body) as response:
            if response.status != 200:
                sample.error = f"HTTP {response.status}: {(await response.text())[:200]}"
                return sample
            async for raw in response.content:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    sample.error = str(chunk["error"].get("message"))[:200]
                    break
                choices = chunk.get("choices") or []
                delta = choices[0].get("delta", {}) if choices else {}
                if delta.get("content") and sample.first_token_s is None:
                    sample.first_token_s = time.perf_counter() - sample.started
                timings = (chunk.get("toolrl") or {}).get("timings")
                if timings:
                    sample.model_s, sample.tools_s = timings["model_s"], timings["tools_s"]
                    sample.episode_s = timings["episode_s"]
                    sample.door_s = timings.get("door_s", 0.0)
        sample.total_s = time.perf_counter() - sample.started
    except Exception as exc:  # a failed request is a figure, not a crash
        sample.error = f"{type(exc).__name__}: {str(exc)[:200]}"
    return sample


async def run_load(
    url: str,
    model: str,
    clients: int,
    seconds: float,
    midway: Any = None,
    question: str = QUESTION,
    api_key: str | None = None,
) -> tuple[Load, float]:
    import aiohttp

    load = Load()
    stop_at = time.perf_counter() + seconds
    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=clients + 4)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    async with aiohttp.ClientSession(timeout=timeout, connector=connector, headers=headers) as http:

        async def client() -> None:
            while time.perf_counter() < stop_at:
                load.samples.append(await one_request(http, url, model, question))

        async def trigger() -> None:
            await asyncio.sleep(seconds / 2)
            if midway is not None:
                await asyncio.to_thread(midway)

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)), trigger())
        wall = time.perf_counter() - started
    return load, wall


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used (/proc), to price a request in CPU rather
    than in latency, which on two shared cores is mostly waiting for one."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def priced(summary: dict[str, Any], cpu_s: float) -> dict[str, Any]:
    """`summary` with the front door process's CPU per request added."""
    done = max(1, summary["succeeded"])
    summary["front_door_cpu_ms_per_request"] = round(1000 * cpu_s / done, 2)
    return summary


def summarise(load: Load, wall_s: float) -> dict[str, Any]:
    done = [s for s in load.samples if s.error is None and s.total_s is not None]
    failed = [s for s in load.samples if s.error is not None]
    ttft = [s.first_token_s for s in done if s.first_token_s is not None]
    total = [s.total_s for s in done if s.total_s is not None]
    overhead_ms = [1000 * (s.total_s - s.model_s - s.tools_s) for s in done if s.total_s]
    door_ms = [1000 * (s.total_s - s.episode_s) for s in done if s.total_s]
    # what the front door itself adds, timed inside it; the rest of `overhead` is the
    # network, the client's own event loop and waiting for a core on the client's side
    own_ms = [1000 * (s.door_s - s.model_s - s.tools_s) for s in done if s.door_s]

    def ms(values: list[float], q: float) -> float | None:
        value = percentile(values, q)
        return None if value is None else round(1000 * value, 1)

    return {
        "requests": len(load.samples),
        "succeeded": len(done),
        "failed": len(failed),
        "failures": sorted({s.error or "" for s in failed})[:5],
        "wall_s": round(wall_s, 1),
        "requests_per_s": round(len(done) / wall_s, 3),
        "ttft_ms_p50": ms(ttft, 0.5),
        "ttft_ms_p99": ms(ttft, 0.99),
        "latency_ms_p50": ms(total, 0.5),
        "latency_ms_p99": ms(total, 0.99),
        "model_s_mean": round(statistics.fmean(s.model_s for s in done), 3) if done else None,
        "overhead_vs_model_server_ms_p50": round(percentile(overhead_ms, 0.5) or 0.0, 1),
        "overhead_vs_model_server_ms_p99": round(percentile(overhead_ms, 0.99) or 0.0, 1),
        "front_door_only_ms_p50": round(percentile(door_ms, 0.5) or 0.0, 1),
        "inside_front_door_ms_p50": round(percentile(own_ms, 0.5) or 0.0, 1),
        "inside_front_door_ms_p99": round(percentile(own_ms, 0.99) or 0.0, 1),
    }


def promote_a_new_version(tracking_uri: str, name: str, cache: Path) -> str:
    """A second version of the champion's weights, promoted: what a retraining run does."""
    from training.registry.registry import Lineage, download, promote, register_candidate, resolve

    champion = resolve(tracking_uri, f"models:/{name}@champion")
    model_dir = download(tracking_uri, champion, cache)
    lineage = Lineage(
        run_key=f"bench-reload-{int(time.time())}",
        dataset_version=champion.tags.get("toolrl.dataset_version", "bench"),
        parent_version=champion.version,
    )
    candidate = register_candidate(tracking_uri, name, model_dir, lineage)
    promote(tracking_uri, name, candidate.version)
    return candidate.version


def instant_upstream_phase(
    stack: Any, args: argparse.Namespace, env: dict[str, str], scratch: Path, logs: Path
) -> dict[str, Any]:
    """The front door alone (`toolrl frontdoor`) over the scripted model server, which answers
    at once: the same episode shape (a tool call, the real tool, an answer) without a model
    taking both cores, so what remains is the front door's and the agent loop's own cost."""
    import pandas as pd

    from serving.runtime.ports import free_port
    from training.ops.demo.common import BIN
    from training.ops.demo.services import ManagedService

    test = next((args.workdir / "datasets").glob("*/test.parquet"))
    rows = pd.read_parquet(test)
    question = str(rows[rows["category"] == "single"].iloc[0]["query"])
    scripted, door = free_port(), free_port()
    stack.start(
        ManagedService(
            "scripted model server (instant)",
            [*SCRIPTED, "--data", str(test), "--port", str(scripted)],
            f"http://127.0.0.1:{scripted}/health",
            logs / "scripted.log",
            env,
        )
    )
    front = stack.start(
        ManagedService(
            "toolrl frontdoor (over the scripted server)",
            [
                str(BIN / "toolrl"),
                "frontdoor",
                "--upstream",
                f"http://127.0.0.1:{scripted}/v1",
                "--model",
                "scripted",
                "--port",
                str(door),
            ],
            f"http://127.0.0.1:{door}/health",
            logs / "frontdoor-instant.log",
            env,
        )
    )
    assert front.process is not None
    pid = front.process.pid
    before = cpu_seconds(pid)
    load, wall = asyncio.run(
        run_load(
            f"http://127.0.0.1:{door}/v1",
            "scripted",
            args.clients,
            args.seconds / 2,
            question=question,
        )
    )
    summary = priced(summarise(load, wall), cpu_seconds(pid) - before)
    summary["question"] = question
    return summary


def _instant_doors(
    stack: Any, args: argparse.Namespace, doors: dict[str, dict[str, str]], logs: Path
) -> tuple[str, dict[str, int], dict[str, int]]:
    """The real MCP server, the instant scripted model server and one `toolrl frontdoor`
    per entry of `doors` (name -> extra env) over it; returns the question, the ports and
    each door's pid."""
    import pandas as pd

    from serving.runtime.ports import free_port
    from training.ops.demo.common import BIN
    from training.ops.demo.run import mcp_service
    from training.ops.demo.services import ManagedService

    tests = sorted((args.workdir / "datasets").glob("*/test.parquet"))
    if not tests:
        raise SystemExit(f"no dataset under {args.workdir / 'datasets'}: run `make demo` first")
    rows = pd.read_parquet(tests[-1])
    question = str(rows[rows["category"] == "single"].iloc[0]["query"])
    ports = {k: free_port() for k in ("mcp", "scripted", *doors)}
    env = {
        "TOOLRL_MCP_URL": f"http://127.0.0.1:{ports['mcp']}/mcp",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    stack.start(mcp_service("real", ports["mcp"], logs / "mcp.log", env))
    stack.start(
        ManagedService(
            "scripted model server (instant)",
            [*SCRIPTED, "--data", str(tests[-1]), "--port", str(ports["scripted"])],
            f"http://127.0.0.1:{ports['scripted']}/health",
            logs / "scripted.log",
            env,
        )
    )
    upstream = f"http://127.0.0.1:{ports['scripted']}/v1"
    pids: dict[str, int] = {}
    for name, extra in doors.items():
        command = [str(BIN / "toolrl"), "frontdoor", "--upstream", upstream, "--model"]
        command += ["scripted", "--port", str(ports[name])]
        door = stack.start(
            ManagedService(
                f"toolrl frontdoor ({name})",
                command,
                f"http://127.0.0.1:{ports[name]}/health",
                logs / f"frontdoor-{name}.log",
                {**env, **extra},
            )
        )
        assert door.process is not None
        pids[name] = door.process.pid
    return question, ports, pids


def concurrency_sweep(args: argparse.Namespace) -> None:
    """One front door over the instant scripted model, at 1, 8 and 32 clients: where its
    own cost (timed inside it, and its CPU per request) ends and queueing for two shared
    cores begins (results/frontdoor_sweep.json)."""
    from training.ops.demo.services import service_stack

    scratch = Path(tempfile.mkdtemp(prefix="toolrl-bench-frontdoor-sweep-"))
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "seconds_per_level": args.seconds,
        "levels": {},
    }
    with service_stack() as stack:
        question, ports, pids = _instant_doors(stack, args, {"door": {}}, scratch / "logs")
        pid = pids["door"]
        for clients in (1, 8, 32):
            before = cpu_seconds(pid)
            load, wall = asyncio.run(
                run_load(
                    f"http://127.0.0.1:{ports['door']}/v1",
                    "scripted",
                    clients,
                    args.seconds,
                    question=question,
                )
            )
            summary = priced(summarise(load, wall), cpu_seconds(pid) - before)
            report["levels"][str(clients)] = summary
            print(f"{clients:3d} clients {json.dumps(summary)}", flush=True)
    out = args.out.with_name("frontdoor_sweep.json") if args.out == RESULTS else args.out
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    shutil.rmtree(scratch, ignore_errors=True)


def auth_side_by_side(args: argparse.Namespace) -> None:
    """Two front doors over one instant scripted model server, one open and one requiring
    its API key, driven in interleaved rounds: what the key check costs per request."""
    import secrets

    from training.ops.demo.services import service_stack

    key = secrets.token_hex(32)
    scratch = Path(tempfile.mkdtemp(prefix="toolrl-bench-frontdoor-auth-"))
    logs = scratch / "logs"
    rounds: dict[str, list[dict[str, Any]]] = {"no_key": [], "api_key": []}
    with service_stack() as stack:
        doors = {"open": {}, "keyed": {"TOOLRL_FRONTDOOR_API_KEY": key}}
        question, ports, _ = _instant_doors(stack, args, doors, logs)
        for r in range(args.rounds):
            for label, port, api_key in (
                ("no_key", ports["open"], None),
                ("api_key", ports["keyed"], key),
            ):
                load, wall = asyncio.run(
                    run_load(
                        f"http://127.0.0.1:{port}/v1",
                        "scripted",
                        args.clients,
                        args.seconds,
                        question=question,
                        api_key=api_key,
                    )
                )
                summary = summarise(load, wall)
                rounds[label].append(summary)
                print(f"round {r + 1} {label:8s} {json.dumps(summary)}", flush=True)

    def median(label: str, field_name: str) -> float:
        return float(statistics.median(float(x[field_name] or 0.0) for x in rounds[label]))

    report = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "clients": args.clients,
        "seconds_per_round": args.seconds,
        "rounds": rounds,
        "median": {
            label: {
                f: median(label, f)
                for f in ("latency_ms_p50", "front_door_only_ms_p50", "requests_per_s", "failed")
            }
            for label in rounds
        },
    }
    report["ratios"] = {
        "latency_p50_key_over_open": round(
            median("api_key", "latency_ms_p50") / median("no_key", "latency_ms_p50"), 3
        ),
        "front_door_only_p50_key_over_open": round(
            median("api_key", "front_door_only_ms_p50")
            / max(median("no_key", "front_door_only_ms_p50"), 1e-9),
            3,
        ),
    }
    report["target"] = "the API key adds at most 5% to the front door's latency"
    out = args.out.with_name("frontdoor_auth.json") if args.out == RESULTS else args.out
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report["ratios"]), f"wrote {out}")
    shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=ROOT / "runs" / "demo")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--auth",
        action="store_true",
        help="Only the API key's cost: two front doors (open, keyed) over the instant "
        "scripted model, interleaved rounds of --seconds each (results/frontdoor_auth.json).",
    )
    parser.add_argument("--rounds", type=int, default=3, help="Rounds per door with --auth.")
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="Only the front door's own cost: one door over the instant scripted model at "
        "1, 8 and 32 clients, --seconds each (results/frontdoor_sweep.json).",
    )
    args = parser.parse_args()
    if args.auth:
        auth_side_by_side(args)
        return
    if args.sweep:
        concurrency_sweep(args)
        return

    from serving.runtime.ports import free_port
    from training.ops.demo.common import BIN, MODEL_NAME
    from training.ops.demo.run import mcp_service, mlflow_service
    from training.ops.demo.services import ManagedService, service_stack

    registry = args.workdir / "mlflow"
    if not (registry / "mlflow.db").is_file():
        raise SystemExit(f"no demo registry at {registry}: run `make demo` first")
    scratch = Path(tempfile.mkdtemp(prefix="toolrl-bench-frontdoor-"))
    shutil.copytree(registry, scratch / "mlflow")
    ports = {k: free_port() for k in ("mlflow", "mcp", "frontdoor")}
    tracking_uri = f"http://127.0.0.1:{ports['mlflow']}"
    env = {
        "MLFLOW_TRACKING_URI": tracking_uri,
        "TOOLRL_MODEL_NAME": MODEL_NAME,
        "TOOLRL_MCP_URL": f"http://127.0.0.1:{ports['mcp']}/mcp",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "TOKENIZERS_PARALLELISM": "false",
    }
    os.environ["MLFLOW_TRACKING_URI"] = tracking_uri
    logs = scratch / "logs"
    url = f"http://127.0.0.1:{ports['frontdoor']}/v1"
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "clients": args.clients,
        "seconds": args.seconds,
        "question": QUESTION,
    }
    with service_stack() as stack:
        stack.start(mlflow_service(scratch / "mlflow", ports["mlflow"], logs / "mlflow.log", env))
        stack.start(mcp_service("real", ports["mcp"], logs / "mcp.log", env))
        command = [str(BIN / "toolrl"), "serve", "--backend", "cpu", "--port"]
        command += [str(ports["frontdoor"]), "--watch-interval", "2", "--max-tokens", "128"]
        command += ["--cache-dir", str(scratch / "serving")]
        serving = stack.start(
            ManagedService(
                "toolrl serve (CPU engine + front door)",
                command,
                f"http://127.0.0.1:{ports['frontdoor']}/health",
                logs / "serving.log",
                env,
                start_timeout_s=600,
            )
        )
        print(f"front door at {url}; {args.clients} streaming clients x {args.seconds:.0f} s")
        assert serving.process is not None
        door_pid = serving.process.pid  # `toolrl serve` (front door); the engine is its child
        before = cpu_seconds(door_pid)
        load, wall = asyncio.run(run_load(url, MODEL_NAME, args.clients, args.seconds))
        result["steady"] = priced(summarise(load, wall), cpu_seconds(door_pid) - before)
        print("steady:", json.dumps(result["steady"]), flush=True)

        promoted: dict[str, str] = {}

        def midway() -> None:
            promoted["version"] = promote_a_new_version(tracking_uri, MODEL_NAME, scratch / "v2")
            print(f"  promoted version {promoted['version']} mid-run", flush=True)

        load, wall = asyncio.run(
            run_load(url, MODEL_NAME, args.clients, args.seconds, midway=midway)
        )
        result["with_reload"] = summarise(load, wall)
        result["with_reload"]["promoted_version"] = promoted.get("version")
        print("with reload:", json.dumps(result["with_reload"]), flush=True)
        result["instant_upstream"] = instant_upstream_phase(stack, args, env, scratch, logs)
        print("instant upstream:", json.dumps(result["instant_upstream"]), flush=True)
    overhead = result["steady"]["overhead_vs_model_server_ms_p50"]
    result["targets"] = {
        "failed_steady": {"target": 0, "measured": result["steady"]["failed"]},
        "failed_with_reload": {"target": 0, "measured": result["with_reload"]["failed"]},
        "overhead_ms_p50": {"target": OVERHEAD_TARGET_MS, "measured": overhead},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
