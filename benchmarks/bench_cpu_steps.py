"""Where a CPU training step's time goes: the SFT step, GRPO's generation and GRPO's update,
each timed on the demo's model and data, its FLOPs counted from the model's shape and the
tokens it touches, and reported as a share of the matmul peak measured in the same process.

What is counted (SmolLM2-135M: 30 layers, hidden 576, 106M parameters in the layers, a
49,152 x 576 output head tied to the embeddings):
- a token through the layers without gradient: 2 x layer parameters, plus attention
  (4 x hidden x keys attended, per layer); with gradient: 3x that (forward, and the
  backward's input and weight gradients);
- a position whose next token is scored: 2 x head parameters (3x with gradient);
- generation: every token fed to the engine (the prompt's tokens once, then one per decode
  step), the head only where a token is sampled.
Peak: the best of repeated square matmuls (2048) in the same dtype and thread count, on this
machine, in this process, just before the steps. Records the CPU flags with every figure.

    python benchmarks/bench_cpu_steps.py [--rows 8] [--prompts 4] [--group 4] [--out FILE]

Writes benchmarks/results/cpu_steps.json (or --out). Run it alone: a second process on the
two cores halves every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from serving.engine.cpu_dtype import cpu_facts
from training.cpu_backend.huge_pages import huge_page_state

RESULTS = Path(__file__).parent / "results" / "cpu_steps.json"
SPEC = Path(__file__).resolve().parents[1] / "training" / "specs" / "cpu_smollm2.yaml"


def matmul_peak(dtype: torch.dtype, size: int = 2048, repeats: int = 8) -> float:
    """Best GFLOP/s of a square matmul in `dtype` on this process's threads."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    torch.mm(a, b)  # warm up (thread pool, kernels)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


class Shape:
    """The FLOP arithmetic of one decoder-only model."""

    def __init__(self, model: Any) -> None:
        config = model.config
        self.layers = int(config.num_hidden_layers)
        self.hidden = int(config.hidden_size)
        head = model.get_output_embeddings().weight
        self.head_params = int(head.numel())
        embeddings = model.get_input_embeddings().weight
        total = sum(int(p.numel()) for p in model.parameters())
        self.layer_params = total - int(embeddings.numel())
        if head.data_ptr() != embeddings.data_ptr():
            self.layer_params -= self.head_params

    def body(self, tokens: int, keys: float) -> float:
        """Forward FLOPs of `tokens` through the layers, each attending to `keys` keys."""
        return tokens * (2 * self.layer_params + self.layers * 4 * self.hidden * keys)

    def head(self, positions: int) -> float:
        return positions * 2 * self.head_params


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Best wall time of `repeats` calls (the first one included: nothing is cached)."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def demo_rows(folder: Path, n: int) -> list[dict[str, Any]]:
    import pandas as pd

    from training.data.packs.generate import generate_builtin_dataset

    generate_builtin_dataset(folder, n=max(200, n * 4), seed=0, chinese_fraction=0.0)
    frame = pd.read_parquet(folder / "train.parquet")
    return [{str(k): v for k, v in row.items()} for row in frame.to_dict("records")]


def sft_step(
    model: Any, renderer: Any, rows: Sequence[dict[str, Any]], spec: Any, shape: Shape, repeats: int
) -> dict[str, Any]:
    """One SFT step of the demo spec: frozen context with the question's gradient and the
    call-boundary weight, forward, backward and the optimizer."""
    from serving.tools import get_catalog
    from training.cpu_backend.packed_loss import (
        CallBoundary,
        frozen_context_sft_loss,
        sft_positions,
    )
    from training.cpu_backend.sft import call_close_token, tokenize_rows, trajectory

    schemas = get_catalog().openai_schemas()
    tokenized, _ = tokenize_rows(renderer, [trajectory(r) for r in rows], schemas, 4096)
    width = max(len(r["input_ids"]) for r in tokenized)
    ids = torch.zeros((len(tokenized), width), dtype=torch.long)
    mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
    for i, row in enumerate(tokenized):
        ids[i, : len(row["input_ids"])] = torch.tensor(row["input_ids"])
        mask[i, : len(row["input_ids"])] = 1
        labels[i, : len(row["labels"])] = torch.tensor(row["labels"])
    boundary = CallBoundary(call_close_token(renderer.tokenizer), spec.cpu.sft_call_boundary_weight)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    model.train()

    def step() -> None:
        loss = frozen_context_sft_loss(
            model,
            ids,
            mask,
            labels,
            question_gradient=spec.cpu.sft_question_gradient,
            boundary=boundary,
        )
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    seconds, _ = timed(step, repeats)
    trained = sft_positions(ids, mask, labels, spec.cpu.sft_question_gradient)
    shared = _shared(trained.sequences)
    context_tokens = shared + sum(len(s) - shared for s in trained.sequences)
    gradient_tokens = sum(
        int(trained.gradient_positions(r).numel()) for r in range(len(trained.sequences))
    )
    scored = sum(int(p.numel()) for p in trained.positions)
    mean_keys = sum(len(s) for s in trained.sequences) / len(trained.sequences) / 2
    flops = (
        shape.body(context_tokens, mean_keys)
        + 3 * shape.body(gradient_tokens, mean_keys * 2)
        + 3 * shape.head(scored)
    )
    return {
        "rows": len(tokenized),
        "context_tokens": context_tokens,
        "gradient_tokens": gradient_tokens,
        "scored_positions": scored,
        "seconds": round(seconds, 3),
        "gflop": round(flops / 1e9, 1),
        "gflops": round(flops / seconds / 1e9, 1),
    }


def _shared(sequences: Sequence[Sequence[int]]) -> int:
    first, length = sequences[0], min(len(s) for s in sequences)
    for other in sequences[1:]:
        i = 0
        while i < length and other[i] == first[i]:
            i += 1
        length = i
    return length


def update_tensors(trajectories: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Trajectories laid out as TRL's update takes them: `ids` and `attention` with prompts
    left-padded and completions right-padded, and the completion columns the model sampled
    (1; tool responses 0)."""
    width_p = max(len(t.prompt_ids) for t in trajectories)
    width_c = max(len(t.completion_ids) for t in trajectories)
    ids = torch.zeros((len(trajectories), width_p + width_c), dtype=torch.long)
    attention = torch.zeros_like(ids)
    sampled = torch.zeros((len(trajectories), width_c), dtype=torch.long)
    for i, t in enumerate(trajectories):
        ids[i, width_p - len(t.prompt_ids) : width_p] = torch.tensor(t.prompt_ids)
        attention[i, width_p - len(t.prompt_ids) : width_p] = 1
        ids[i, width_p : width_p + len(t.completion_ids)] = torch.tensor(t.completion_ids)
        attention[i, width_p : width_p + len(t.completion_ids)] = 1
        sampled[i, : len(t.completion_ids)] = torch.tensor(t.model_token_mask)
    return ids, attention, sampled


def grpo_phases(
    model: Any, renderer: Any, rows: Sequence[dict[str, Any]], spec: Any, shape: Shape, mcp_url: str
) -> dict[str, Any]:
    """One GRPO step's two phases on `rows` x `rollout.n` rollouts of the demo spec:
    generation (the agent loop on the in-process engine, MCP tools in mock mode) and the
    update (reference and policy log-probabilities, backward, optimizer)."""
    from training.cpu_backend.episodes import EpisodeJob, run_episodes
    from training.cpu_backend.grpo import rollout_settings
    from training.cpu_backend.packed_loss import frozen_context_completion_logps

    settings = rollout_settings(spec)
    group = spec.rollout.n
    jobs = [
        EpisodeJob(row["prompt"], f"bench-{i}-{k}")
        for i, row in enumerate(rows)
        for k in range(group)
    ]
    start = time.perf_counter()
    trajectories = run_episodes(model, renderer, mcp_url, jobs, settings, spec.cpu.threads)
    generation_s = time.perf_counter() - start
    decoded = sum(len(t.completion_ids) for t in trajectories)
    sampled = sum(sum(t.model_token_mask) for t in trajectories)
    prompts = [t.prompt_ids for t in trajectories]
    prefill = _shared(prompts) + sum(len(p) - _shared(prompts) for p in prompts)
    mean_keys = sum(len(p) for p in prompts) / len(prompts)
    generation_flops = shape.body(prefill + decoded, mean_keys) + shape.head(sampled)

    ids, attention, trained = update_tensors(trajectories)
    width_c = trained.shape[1]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7)
    model.train()
    start = time.perf_counter()
    with torch.no_grad():  # the reference model's log-probabilities (KL), one no-grad pass
        frozen_context_completion_logps(model, ids, attention, width_c)
    reference_s = time.perf_counter() - start
    start = time.perf_counter()
    logps, _ = frozen_context_completion_logps(model, ids, attention, width_c, 1.0, False, trained)
    (-(logps * trained).sum() / trained.sum()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    policy_s = time.perf_counter() - start
    context = prefill + decoded
    reference_flops = shape.body(context, mean_keys) + shape.head(decoded)
    policy_flops = (
        shape.body(context, mean_keys)
        + 3 * shape.body(sampled, mean_keys)
        + 3 * shape.head(sampled)
    )
    return {
        "rollouts": len(trajectories),
        "generation": {
            "seconds": round(generation_s, 3),
            "prompt_tokens_computed": prefill,
            "completion_tokens": decoded,
            "sampled_tokens": sampled,
            "gflop": round(generation_flops / 1e9, 1),
            "gflops": round(generation_flops / generation_s / 1e9, 1),
            "sampled_tokens_per_s": round(sampled / generation_s, 1),
        },
        "update_reference": {
            "seconds": round(reference_s, 3),
            "gflop": round(reference_flops / 1e9, 1),
            "gflops": round(reference_flops / reference_s / 1e9, 1),
        },
        "update_policy": {
            "seconds": round(policy_s, 3),
            "gradient_tokens": sampled,
            "gflop": round(policy_flops / 1e9, 1),
            "gflops": round(policy_flops / policy_s / 1e9, 1),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8, help="SFT rows per step (the spec's 8).")
    parser.add_argument("--prompts", type=int, default=4, help="GRPO prompts per step.")
    parser.add_argument("--repeats", type=int, default=2, help="SFT steps timed (best kept).")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--mmap-threshold-mib",
        type=float,
        help="Fix glibc's mmap threshold first, as the training stage does "
        "(cpu.malloc_mmap_threshold_mib); unset: glibc's default.",
    )
    args = parser.parse_args()

    from training.cpu_backend.memory import set_mmap_threshold

    set_mmap_threshold(args.mmap_threshold_mib)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from serving.mcp_server.config import ServerConfig
    from serving.mcp_server.server import start
    from training.cpu_backend.compute_dtype import choose, cpu_flags
    from training.cpu_backend.episodes import cpu_renderer
    from training.model.prepare import prepared_dir
    from training.spec.model import load_spec

    spec = load_spec(SPEC)
    torch.set_num_threads(spec.cpu.threads)
    torch.manual_seed(0)  # the same rollouts in every run, so two runs time the same work
    dtype = choose(args.dtype, cpu_flags()).dtype
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    facts = cpu_facts()
    peak = {"float32": round(matmul_peak(torch.float32), 1)}
    if dtype == "bfloat16":
        peak["bfloat16"] = round(matmul_peak(torch.bfloat16), 1)
    model_dir = prepared_dir(spec.model.path)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch_dtype)
    renderer = cpu_renderer(tokenizer, spec.model.enable_thinking)
    shape = Shape(model)
    with tempfile.TemporaryDirectory(prefix="bench-steps-") as scratch:
        rows = demo_rows(Path(scratch), args.rows)
    sft = sft_step(model, renderer, rows[: args.rows], spec, shape, args.repeats)
    with start(ServerConfig(mode="mock", port=0, workers=1, log_level="warning")) as server:
        grpo = grpo_phases(model, renderer, rows[: args.prompts], spec, shape, server.url)
    dtype_peak = peak[dtype]
    for block in (sft, grpo["generation"], grpo["update_reference"], grpo["update_policy"]):
        block["share_of_peak"] = round(block["gflops"] / dtype_peak, 3)
    report = {
        "machine": facts,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "dtype": dtype,
        "threads": spec.cpu.threads,
        "mmap_threshold_mib": args.mmap_threshold_mib,
        "huge_pages": huge_page_state(),
        "matmul_peak_gflops": peak,
        "model": {"layer_params": shape.layer_params, "head_params": shape.head_params},
        "sft_step": sft,
        "grpo_step": grpo,
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
