"""The in-process engine stepped on its own thread against stepped on the main thread.

The trainer's rollouts and quick evals generate on the project's engine in the training
process, whose main thread has already run torch (SFT, the GRPO update). torch's OpenMP pool
is fast only for the thread that made it: the demo's training job ran its generation phases
on about 1.0 of its 2 cores (`demo_cpu_share.json`, 2026-12-07). This times the same requests
both ways in one process, after the main thread has run a forward and backward as a trainer
has:

- `own thread` (before): `EngineWorker` steps the engine on a thread of its own and the
  caller submits from the main thread;
- `main thread` (now, `training/cpu_backend/episodes.run_episodes`): the worker is made with
  `own_thread=False`, a helper thread submits, and the main thread runs `run_here`.

Prompts shaped like the demo's (an ~800-token shared tool prompt and a short question per
row, `bench_engine_decode.prompts`), sampled at temperature 0.8 with a seed and no stop
token, so every row decodes exactly `--new` tokens in both arms. The arms alternate for
`--rounds` rounds; the ratio is of the medians.

It also times one decode-sized linear layer from the main thread and from a second one.
Run it again with `OMP_WAIT_POLICY=passive` (OpenMP's pool threads then sleep between
regions instead of spinning) to see where the main thread's advantage comes from.

    python benchmarks/bench_engine_thread.py [--rows 8 16] [--new 48] [--rounds 2]

Writes benchmarks/results/engine_thread.json with the CPU flags. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = Path(__file__).parent / "results" / "engine_thread.json"
SPEC = ROOT / "training" / "specs" / "cpu_smollm2.yaml"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[8, 16], help="Batch sizes.")
    parser.add_argument("--new", type=int, default=48, help="Tokens each row generates.")
    parser.add_argument("--rounds", type=int, default=2, help="Alternating rounds per size.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.new < 1 or args.rounds < 1 or min(args.rows) < 1:
        parser.error("--rows, --new and --rounds must be positive")

    import torch
    from bench_engine_decode import prompts
    from transformers import AutoModelForCausalLM

    from serving.engine.cpu_dtype import choose, cpu_facts
    from serving.engine.engine import Engine, Request, Sampling
    from serving.engine.worker import EngineWorker
    from training.cpu_backend.precision import torch_dtype
    from training.spec.model import load_spec
    from training.spec.resolve import resolve_model

    spec = load_spec(SPEC)
    threads = spec.cpu.threads
    torch.set_num_threads(threads)
    dtype = choose(spec.cpu.dtype).dtype
    with tempfile.TemporaryDirectory(prefix="bench-engine-thread-") as scratch:
        base = resolve_model(spec, Path(scratch))
        model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch_dtype(dtype))
    # the main thread trains first, as the trainer's has by the time it generates
    batch = torch.randint(100, 40_000, (2, 256))
    model(input_ids=batch, labels=batch).loss.backward()
    model.zero_grad(set_to_none=True)
    model.eval()

    def requests(rows: int) -> tuple[list[Request], threading.Event]:
        done = threading.Event()
        left = [rows]

        def finished(_: Request) -> None:
            left[0] -= 1
            if left[0] == 0:
                done.set()

        made = []
        for prompt in prompts(rows):
            request = Request(
                prompt=prompt,
                sampling=Sampling(max_new_tokens=args.new, temperature=0.8, seed=0),
            )
            request.on_finish = finished
            made.append(request)
        return made, done

    def own_thread(rows: int) -> list[Request]:
        worker = EngineWorker(Engine(model, max_rows=max(16, rows)), threads)
        made, done = requests(rows)
        for request in made:
            worker.submit(request)
        done.wait()
        worker.close()
        return made

    def main_thread(rows: int) -> list[Request]:
        worker = EngineWorker(Engine(model, max_rows=max(16, rows)), threads, own_thread=False)
        made, done = requests(rows)

        def feed() -> None:
            for request in made:
                worker.submit(request)
            done.wait()
            worker.close()

        feeder = threading.Thread(target=feed)
        feeder.start()
        worker.run_here()
        feeder.join()
        return made

    def small_linear_us() -> float:
        """Microseconds of one decode-sized linear layer (8 rows, 576 -> 1536), the kind of
        small op a decode step is made of, on whichever thread calls it."""
        weight = torch.randn(1536, 576).to(model.dtype)
        rows = torch.randn(8, 576).to(model.dtype)
        with torch.no_grad():
            for _ in range(50):
                torch.nn.functional.linear(rows, weight)
            start = time.perf_counter()
            for _ in range(3000):
                torch.nn.functional.linear(rows, weight)
        return (time.perf_counter() - start) / 3000 * 1e6

    on_thread: list[float] = []

    def linear_on_a_thread() -> None:
        torch.set_num_threads(threads)
        on_thread.append(small_linear_us())

    on_main = small_linear_us()
    helper = threading.Thread(target=linear_on_a_thread)
    helper.start()
    helper.join()
    small_linear = {"main thread": round(on_main, 1), "own thread": round(on_thread[0], 1)}
    print(f"small linear: {small_linear} (microseconds)", flush=True)

    arms: dict[str, Callable[[int], list[Request]]] = {
        "own thread": own_thread,
        "main thread": main_thread,
    }
    main_thread(2)  # warm-up: the shapes' first kernels are built outside the timings
    own_thread(2)
    sizes: list[dict[str, Any]] = []
    for rows in args.rows:
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
        for _ in range(args.rounds):
            for name, arm in arms.items():
                wall, cpu = time.perf_counter(), cpu_seconds()
                made = arm(rows)
                wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
                tokens = sum(len(request.tokens) for request in made)
                if any(request.finish == "error" for request in made):
                    raise SystemExit(f"{name}: a request failed: {made[0].error}")
                runs[name].append(
                    {"seconds": round(wall, 3), "tokens": tokens, "cores": round(cpu / wall, 2)}
                )
                print(f"{rows} rows, {name}: {wall:.2f} s, {cpu / wall:.2f} cores", flush=True)
        median = {name: statistics.median(r["seconds"] for r in runs[name]) for name in arms}
        sizes.append(
            {
                "rows": rows,
                "new_tokens": args.new,
                "runs": runs,
                "median_s": median,
                "tokens_per_s": {
                    name: round(runs[name][0]["tokens"] / median[name], 1) for name in arms
                },
                "main_over_own_thread": round(median["main thread"] / median["own thread"], 3),
            }
        )
        print(f"{rows} rows: main thread / own thread = {sizes[-1]['main_over_own_thread']}")
    entry = {
        "measured_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_facts(),
        "dtype": dtype,
        "threads": threads,
        "prefix_tokens": len(prompts(1)[0]),
        "rounds": args.rounds,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "small_linear_us": small_linear,
        "sizes": sizes,
    }
    history = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([*history, entry], indent=2) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
