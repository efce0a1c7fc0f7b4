"""Benchmark: how long hostile inputs take, the figures the tests no longer assert.

Tests check that hostile inputs get a clear answer and never hang (a generous timeout); how
fast they are answered is measured here, as ratios against an ordinary input of the same
function in the same process, since this machine's speed varies:

- model output: the parser (both call formats), the reward check and the drift counter on
  1 MB outputs and deeply nested JSON, against one well-formed call;
- `calculate_math`: hostile expressions (a huge power, deep nesting, factorial chains), against
  `256*37`;
- tool arguments: a tool call with 5 KB of junk arguments, against a valid call;
- DAG parsing: the project's DAG folder in a fresh interpreter, against a one-task TaskFlow
  DAG parsed the same way.

Prints the figures and writes benchmarks/results/hostile_inputs.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "hostile_inputs.json"


def seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of `fn`; errors are answers here, not failures."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        with contextlib.suppress(Exception):  # a clear refusal is the expected answer
            fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def model_output_cases() -> dict[str, str]:
    from training.rewards.samples import render_hermes, tool_turn

    call = render_hermes("calculate_math", {"expression": "1+1"})
    deep = "[" * 100_000 + "]" * 100_000
    return {
        "one well-formed call (baseline)": call,
        "1 MB of one letter": "a" * 1_000_000,
        "12,000 calls": (call + "\n") * 12_000,
        "90,000 open tags": "<tool_call>" * 90_000,
        "70,000 XML parameters": "<tool_call>\n<function=f>\n" + "<parameter=x>\n" * 70_000,
        "5,000 call + tool turns": ("<tool_call>" + call + tool_turn(["ok"])) * 5_000,
        "1 MB of CJK": "天气很好" * 250_000,
        "JSON nested 100,000 deep": f'<tool_call>{{"name": "f", "arguments": {deep}}}</tool_call>',
    }


def bench_model_output(repeats: int) -> dict[str, Any]:
    from serving.toolcalls import parse_tool_calls
    from training.rewards import compute_score
    from training.rewards.drift import format_drift

    truth = '{"category": "irrelevance"}'

    def consume(text: str) -> None:
        for fmt in ("hermes", "qwen3_coder"):
            parse_tool_calls(text, fmt)
        compute_score("toolrl/synthetic", text, truth, {})
        format_drift([text])

    cases = model_output_cases()
    baseline = seconds(lambda: consume(cases["one well-formed call (baseline)"]), repeats * 20)
    out = {}
    for name, text in cases.items():
        took = seconds(lambda text=text: consume(text), repeats)  # type: ignore[misc]
        out[name] = {"chars": len(text), "s": round(took, 4), "ratio": round(took / baseline, 1)}
        print(f"model output  {name:34s} {took:8.4f} s  {took / baseline:10.1f}x", flush=True)
    return out


def bench_math(repeats: int) -> dict[str, Any]:
    from serving.tools.safe_math import evaluate

    cases = {
        "256*37 (baseline)": "256*37",
        "9**9**9": "9**9**9",
        "factorial chain": "+".join(["factorial(170)"] * 30),
        "nesting 90 deep": "+".join(["1"] * 90),
        "nesting 200 deep (refused)": "+".join(["1"] * 200),
        "exp(1000) (refused)": "exp(1000)",
        "10 KB of digits": "1" * 10_000,
    }
    baseline = seconds(lambda: evaluate(cases["256*37 (baseline)"]), repeats * 100)
    out = {}
    for name, expression in cases.items():
        took = seconds(lambda e=expression: evaluate(e), repeats)  # type: ignore[misc]
        out[name] = {"s": round(took, 5), "ratio": round(took / baseline, 1)}
        print(f"calculate_math {name:33s} {took:8.5f} s  {took / baseline:10.1f}x", flush=True)
    return out


def bench_tool_arguments(repeats: int) -> dict[str, Any]:
    from serving.tools import ToolContext, get_catalog

    catalog, context = get_catalog(), ToolContext.reference()
    valid = {"location": "Paris"}
    junk: dict[str, Any] = {f"k{i}": ["x" * 50] * 2 for i in range(50)}
    baseline = seconds(lambda: catalog.execute("get_current_weather", valid, context), repeats * 20)
    took = seconds(lambda: catalog.execute("get_current_weather", junk, context), repeats * 20)
    print(f"tool arguments 5 KB of junk: {took:.5f} s, {took / baseline:.1f}x a valid call")
    return {
        "valid_call_s": round(baseline, 5),
        "junk_s": round(took, 5),
        "ratio": round(took / baseline, 1),
    }


def parse_in_fresh_interpreter(dag_folder: Path, plugins: Path | None) -> float:
    paths = [str(dag_folder)] + ([str(plugins)] if plugins else [])
    code = (
        "import sys, time\n"
        f"sys.path[:0] = {paths!r}\n"
        "import airflow.sdk\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "t = time.perf_counter()\n"
        f"bag = DagBag(dag_folder={str(dag_folder)!r})\n"
        "print(time.perf_counter() - t, len(bag.dags), len(bag.import_errors))\n"
    )
    env = {**os.environ, "AIRFLOW_HOME": str(ROOT / ".airflow-test")}
    out = (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        .stdout.strip()
        .splitlines()[-1]
        .split()
    )  # Airflow logs to stdout before the figures
    if out[2] != "0":
        raise SystemExit(f"{dag_folder} has import errors")
    return float(out[0])


BASELINE_DAG = """
import pendulum
from airflow.sdk import dag, task


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def baseline():
    @task
    def hello() -> str:
        return "hello"

    hello()


baseline()
"""


def bench_dag_parse(repeats: int) -> dict[str, Any]:
    scratch = ROOT / ".airflow-test" / "bench_baseline_dag"
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "baseline_dag.py").write_text(BASELINE_DAG, encoding="utf-8")
    baseline = statistics.median(parse_in_fresh_interpreter(scratch, None) for _ in range(repeats))
    ours = statistics.median(
        parse_in_fresh_interpreter(ROOT / "dags", ROOT / "plugins") for _ in range(repeats)
    )
    print(f"DAG parse: ours {ours:.3f} s, a one-task TaskFlow DAG {baseline:.3f} s")
    return {
        "project_dags_s": round(ours, 3),
        "one_task_dag_s": round(baseline, 3),
        "ratio": round(ours / baseline, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "model_output": bench_model_output(args.repeats),
        "calculate_math": bench_math(args.repeats),
        "tool_arguments": bench_tool_arguments(args.repeats),
        "dag_parse": bench_dag_parse(args.repeats),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
