"""Evaluation-harness benchmark: cases/s and harness CPU per case against an instant endpoint.

Setup: the scripted oracle OpenAI server (`training.evaluation.scripted`, its own process)
and the real MCP server in mock mode (its own process) on loopback; the harness runs here.
Harness overhead per case = this process's CPU time / cases (model time is the other
process's, so it is excluded; the MCP client's cost is included). Baselines in the same run:
the same evaluation at concurrency 1, and the client CPU per chat request of the official
`openai` async client against the harness's aiohttp client (why the loop has its own).
Targets: overhead < 5 ms/case, >= 200 cases/s at concurrency 32 on 2 cores.
Writes benchmarks/results/eval.json. Run alone (load < 2).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import pandas as pd

from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import start
from serving.runtime.ports import free_port
from serving.runtime.processes import start_process_group, stop_process_group
from training.data.packs.generate import generate_builtin_dataset
from training.evaluation.runner import EvalConfig, evaluate

CASES = 2_000
ROOT = Path(__file__).resolve().parent


def make_data(out: Path) -> Path:
    generate_builtin_dataset(out, n=3_000, seed=7, progress=False)
    frame = pd.read_parquet(out / "test.parquet")
    tiled = pd.concat([frame] * (CASES // len(frame) + 1), ignore_index=True).head(CASES)
    infos = [{**info, "index": i} for i, info in enumerate(tiled["extra_info"])]
    tiled["extra_info"] = pd.Series(infos, index=tiled.index)
    path = out / "bench.parquet"
    tiled.to_parquet(path)
    return path


def wait_http(url: str, seconds: float = 30.0) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def measure(
    data: Path, url: str, mcp_url: str, out: Path, concurrency: int, n: int
) -> dict[str, Any]:
    config = EvalConfig(
        endpoint=url,
        model="scripted",
        data=data,
        out=out,
        mcp_url=mcp_url,
        concurrency=concurrency,
        limit=n,
        fresh=True,
    )
    cpu, wall = time.process_time(), time.perf_counter()
    report = evaluate(config, progress=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    overall = report.metrics["overall"]
    assert overall["pass_rate"] == 1.0, overall
    return {
        "concurrency": concurrency,
        "cases": n,
        "wall_s": round(wall, 3),
        "cases_per_s": round(n / wall, 1),
        "harness_cpu_ms_per_case": round(1000 * cpu / n, 3),
        "mean_turns": overall["mean_turns"],
        "model_requests_per_s": round(n * overall["mean_turns"] / wall, 1),
    }


def client_cost(url: str, requests: int = 1_500, concurrency: int = 32) -> dict[str, Any]:
    """Client CPU per chat request: the harness's aiohttp ChatClient vs the official
    `openai` AsyncOpenAI client (the baseline), same scripted server, same messages."""
    import asyncio

    import openai

    from serving.agent import ChatClient

    messages = [{"role": "user", "content": "hello"}]

    async def ours() -> None:
        client = ChatClient(url, "scripted")
        slots = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with slots:
                await client.chat(messages, [])

        await asyncio.gather(*(one() for _ in range(requests)))
        await client.close()

    async def theirs() -> None:
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        slots = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with slots:
                await client.chat.completions.create(model="scripted", messages=messages)  # type: ignore[arg-type]

        await asyncio.gather(*(one() for _ in range(requests)))
        await client.close()

    out: dict[str, Any] = {"requests": requests}
    for name, run in (("aiohttp_chat_client", ours), ("openai_async_client", theirs)):
        cpu = time.process_time()
        asyncio.run(run())
        out[f"{name}_cpu_ms_per_request"] = round(1000 * (time.process_time() - cpu) / requests, 3)
    out["openai_over_ours"] = round(
        out["openai_async_client_cpu_ms_per_request"]
        / out["aiohttp_chat_client_cpu_ms_per_request"],
        2,
    )
    return out


def main() -> None:
    load = os.getloadavg()[0]
    with TemporaryDirectory() as tmp:
        data = make_data(Path(tmp))
        port = free_port()
        server = start_process_group(
            [sys.executable, "-m", "training.evaluation.scripted", "--data", str(data),
             "--port", str(port)],
        )  # fmt: skip
        try:
            wait_http(f"http://127.0.0.1:{port}/health")
            url = f"http://127.0.0.1:{port}/v1"
            with start(ServerConfig(port=0, workers=1, log_level="warning")) as mcp:
                measure(data, url, mcp.url, Path(tmp) / "warm.json", 32, 100)
                main_run = measure(data, url, mcp.url, Path(tmp) / "r32.json", 32, CASES)
                baseline = measure(data, url, mcp.url, Path(tmp) / "r1.json", 1, 300)
                clients = client_cost(url)
        finally:
            stop_process_group(server, grace_s=10)
    result = {
        "benchmark": "eval harness vs scripted instant endpoint + real MCP (mock)",
        "load_avg_at_start": round(load, 2),
        "cpus": os.cpu_count(),
        "concurrency_32": main_run,
        "baseline_concurrency_1": baseline,
        "speedup_vs_baseline": round(main_run["cases_per_s"] / baseline["cases_per_s"], 2),
        "client_baseline": clients,
        "targets": {"cases_per_s_min": 200, "harness_cpu_ms_per_case_max": 5.0},
        "meets_targets": main_run["cases_per_s"] >= 200
        and main_run["harness_cpu_ms_per_case"] < 5.0,
    }
    (ROOT / "results").mkdir(exist_ok=True)
    (ROOT / "results" / "eval.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
