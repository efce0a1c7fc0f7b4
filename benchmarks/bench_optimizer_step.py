"""What one optimizer step costs on the demo's model: torch's AdamW loop against its fused CPU
kernel, over bf16 weights with fp32 masters (`precision.MasterWeightAdamW`: nearest rounding
as SFT uses it, stochastic rounding as GRPO does) and over a float32 model (AVX2 hosts).

Every arm steps the same SmolLM2-135M parameters with the same random gradients; the best of
`--repeats` steps after a first one (which allocates the optimizer's state) is kept.

    python benchmarks/bench_optimizer_step.py [--repeats 3] [--out FILE]

Writes benchmarks/results/optimizer_step.json with the CPU flags. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from serving.engine.cpu_dtype import cpu_facts
from training.cpu_backend.precision import build_optimizer

RESULTS = Path(__file__).parent / "results" / "optimizer_step.json"
SPEC = Path(__file__).resolve().parents[1] / "training" / "specs" / "cpu_smollm2.yaml"


def step_seconds(model: Any, dtype: str, repeats: int, **options: Any) -> list[float]:
    optimizer = build_optimizer(model, dtype, lr=1e-5, weight_decay=0.0, **options)
    generator = torch.Generator().manual_seed(0)
    times = []
    for _ in range(repeats + 1):
        for param in model.parameters():
            param.grad = torch.randn(param.shape, generator=generator).to(param.dtype) * 1e-3
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
        optimizer.zero_grad(set_to_none=True)
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="Steps timed per arm.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM

    from training.model.prepare import prepared_dir
    from training.spec.model import load_spec

    spec = load_spec(SPEC)
    torch.set_num_threads(spec.cpu.threads)
    model_dir = str(prepared_dir(spec.model.path))
    arms: dict[str, dict[str, Any]] = {}
    parameters = 0
    for dtype, torch_dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype)
        parameters = sum(p.numel() for p in model.parameters())
        rounding = (False, True) if dtype == "bfloat16" else (False,)
        for stochastic in rounding:
            for fused in (False, True):
                name = (
                    f"{dtype}{' stochastic' if stochastic else ''} {'fused' if fused else 'loop'}"
                )
                options: dict[str, Any] = {"fused": fused}
                if dtype == "bfloat16":
                    options["stochastic_rounding"] = stochastic
                seconds = step_seconds(model, dtype, args.repeats, **options)
                arms[name] = {
                    "best_s": round(min(seconds), 3),
                    "each_s": [round(s, 3) for s in seconds],
                }
                print(f"{name:34} {min(seconds):.3f} s", flush=True)
        del model
    for name, arm in arms.items():
        if name.endswith(" fused"):
            loop = arms[name.removesuffix(" fused") + " loop"]["best_s"]
            arm["fused_over_loop"] = round(arm["best_s"] / loop, 3)
    report = {
        "machine": cpu_facts(),
        "threads": spec.cpu.threads,
        "parameters": parameters,
        "arms": arms,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
