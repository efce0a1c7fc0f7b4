"""Peak memory of a GRPO step's update with the SFT replay, four ways in one script:
- summed: the policy loss plus the replay, one backward (the trainer before micro-batches);
- replay_first / policy_first: a backward each, in that order;
- policy_in_halves: the policy loss in two micro-batches of rollouts, each backpropagated
  before the next is built, then the replay (`cpu.grpo_micro_batches: 2`, grpo.py);
- policy_tokens_N: the policy loss in row chunks of at most N sampled tokens, each
  backpropagated before the next, then the replay (`cpu.grpo_update_tokens: N`).

Why: a three-run demo's GRPO phase peaked at 8.52 GiB, over the issue's 8 GiB. The first
guess was the replay's graph held beside the policy's; the figures say the policy graph
alone sets the peak, and only splitting it lowers it.

How: the demo's model and spec (`cpu_smollm2.yaml`: replay coefficient 1, turn weight 4),
one GRPO step's rollouts generated once (prompts x `rollout.n`, the agent loop on the
in-process engine, MCP tools in mock mode) and saved, then each variant in a fresh process
(peak RSS is a per-process high-water mark): load the model and the replay, note the peak,
take the losses and backward passes, note the peak and the wall time. The policy term is the
frozen-context log-probabilities of the sampled tokens with a gradient (the graph TRL's GRPO
loss backpropagates through; its clipping and KL add elementwise terms on those
log-probabilities), normalised by the whole step's tokens so the halves add up to it. Each
variant's gradients are compared with the summed one's, so a split is shown to change memory
and nothing else.

Then, because one step in a fresh process is not a training run (the resident set climbs
from step to step as glibc keeps freed pages), `--job` runs the real training stage
(`python -m training.jobs.entry --backend cpu`, the demo spec after a short SFT) once per
`--job-runs` setting (`cpu.grpo_micro_batches` 1 or 2, `cpu.grpo_update_tokens` 1024 or 512,
or glibc's mmap threshold fixed at 1 or 4 MiB, `cpu.malloc_mmap_threshold_mib`) and reads
each run's peak RSS per phase, and its resident set after every GRPO step, from its
`cpu_report.json`, with its GRPO seconds.

    python benchmarks/bench_grpo_step_memory.py [--prompts 4] [--dtype auto] [--out FILE]
    python benchmarks/bench_grpo_step_memory.py --job [--sft-steps 10] [--grpo-steps 4] \
        [--job-runs micro_batches_1] [--out FILE]

Writes benchmarks/results/grpo_step_memory.json, or with --job grpo_job_memory.json
(or --out). Run it alone.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))  # benchmark scripts are files, not a package

RESULTS = REPO / "benchmarks" / "results" / "grpo_step_memory.json"
JOB_RESULTS = REPO / "benchmarks" / "results" / "grpo_job_memory.json"
#: `--job` runs: name -> the `cpu` fields it changes in the demo spec (`--job-runs` picks).
JOB_RUNS: dict[str, dict[str, Any]] = {
    "micro_batches_1": {"grpo_micro_batches": 1, "grpo_update_tokens": None},
    "micro_batches_2": {"grpo_micro_batches": 2, "grpo_update_tokens": None},
    "update_tokens_1024": {"grpo_micro_batches": 1, "grpo_update_tokens": 1024},
    "update_tokens_512": {"grpo_micro_batches": 1, "grpo_update_tokens": 512},
    "glibc_default": {"malloc_mmap_threshold_mib": None, "grpo_update_tokens": None},
    "mmap_1mib": {"malloc_mmap_threshold_mib": 1, "grpo_update_tokens": None},
    "mmap_4mib": {"malloc_mmap_threshold_mib": 4, "grpo_update_tokens": None},
}
SPEC = REPO / "training" / "specs" / "cpu_smollm2.yaml"
#: `policy_tokens_N`: the policy loss in row chunks of at most N trained tokens
#: (`cpu.grpo_update_tokens`, update_chunks.py), each backpropagated before the next.
VARIANTS = (
    "summed",
    "replay_first",
    "policy_first",
    "policy_in_halves",
    "policy_tokens_1024",
    "policy_tokens_512",
)


def peak_gib() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _load(dtype: str) -> tuple[Any, Any, Any]:
    """The demo spec, its model in `dtype` and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.model.prepare import prepared_dir
    from training.spec.model import load_spec

    spec = load_spec(SPEC)
    torch.set_num_threads(spec.cpu.threads)
    model_dir = prepared_dir(spec.model.path)
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch_dtype)
    return spec, model, AutoTokenizer.from_pretrained(str(model_dir))


def generate(scratch: Path, prompts: int, dtype: str) -> dict[str, Any]:
    """One GRPO step's rollouts as the tensors the update takes; saved for the variants."""
    from bench_cpu_steps import demo_rows, update_tensors

    from serving.mcp_server.config import ServerConfig
    from serving.mcp_server.server import start
    from training.cpu_backend.episodes import EpisodeJob, cpu_renderer, run_episodes
    from training.cpu_backend.grpo import rollout_settings

    spec, model, tokenizer = _load(dtype)
    rows = demo_rows(scratch, prompts)
    renderer = cpu_renderer(tokenizer, spec.model.enable_thinking)
    jobs = [
        EpisodeJob(row["prompt"], f"mem-{i}-{k}")
        for i, row in enumerate(rows[:prompts])
        for k in range(spec.rollout.n)
    ]
    torch.manual_seed(0)
    with start(ServerConfig(mode="mock", port=0, workers=1, log_level="warning")) as server:
        trajectories = run_episodes(
            model, renderer, server.url, jobs, rollout_settings(spec), spec.cpu.threads
        )
    ids, attention, sampled = update_tensors(trajectories)
    torch.save({"ids": ids, "attention": attention, "sampled": sampled}, scratch / "step.pt")
    return {
        "rollouts": len(trajectories),
        "prompt_width": ids.shape[1] - sampled.shape[1],
        "completion_width": sampled.shape[1],
        "sampled_tokens": int(sampled.sum()),
    }


def variant(name: str, scratch: Path, dtype: str) -> dict[str, Any]:
    """One step's backward, `name` = summed or split; peak RSS before and after."""
    from bench_cpu_steps import demo_rows

    from serving.tools import get_catalog
    from training.cpu_backend.packed_loss import frozen_context_completion_logps
    from training.cpu_backend.replay import sft_replay
    from training.cpu_backend.update_chunks import row_chunks
    from training.model.prepare import prepared_dir

    spec, model, _ = _load(dtype)
    demo_rows(scratch / name, 8)  # the replay's SFT examples: the same generator and seed
    replay = sft_replay(
        spec,
        scratch / name / "train.parquet",
        prepared_dir(spec.model.path),
        list(get_catalog().openai_schemas()),
    )
    assert replay is not None, "the demo spec replays SFT (cpu.grpo_sft_replay_coef > 0)"
    step = torch.load(scratch / "step.pt")
    model.train()

    def policy(rows: slice = slice(None)) -> torch.Tensor:
        """The policy term over `rows` of the step, normalised by the whole step's tokens
        (so the terms of a split step add up to the whole step's)."""
        width_c = step["sampled"].shape[1]
        ids, attention, mask = step["ids"][rows], step["attention"][rows], step["sampled"][rows]
        logps, _ = frozen_context_completion_logps(model, ids, attention, width_c, 1.0, False, mask)
        term: torch.Tensor = -(logps * mask).sum() / step["sampled"].sum()
        return term

    before = peak_gib()
    started = time.perf_counter()
    if name == "summed":
        (policy() + replay.loss(model, 0)).backward()
    elif name == "replay_first":
        replay.loss(model, 0).backward()
        policy().backward()
    elif name == "policy_first":
        policy().backward()
        replay.loss(model, 0).backward()
    elif name.startswith("policy_tokens_"):
        budget = int(name.removeprefix("policy_tokens_"))
        for rows in row_chunks([int(n) for n in step["sampled"].sum(dim=1)], budget):
            policy(rows).backward()
        replay.loss(model, 0).backward()
    else:  # two micro-batches of whole groups (rows are group-major), then the replay
        half = step["ids"].shape[0] // 2
        policy(slice(0, half)).backward()
        policy(slice(half, None)).backward()
        replay.loss(model, 0).backward()
    seconds = time.perf_counter() - started
    after = peak_gib()
    grads = [p.grad.float() for p in model.parameters() if p.grad is not None]
    torch.save(grads, scratch / f"{name}.grads.pt")
    return {
        "peak_before_step_gib": round(before, 3),
        "peak_gib": round(after, 3),
        "step_adds_gib": round(after - before, 3),
        "backward_seconds": round(seconds, 2),
    }


def generate_data(scratch: Path, rows: int = 600) -> Path:
    """A built-in dataset of `rows` rows (seed 0) under `scratch/data`."""
    data = scratch / "data"
    generate_command = [sys.executable, "-m", "training.cli", "data", "generate", "--quiet"]
    generate_command += ["--out", str(data), "--n", str(rows)]
    subprocess.run(generate_command, check=True, cwd=REPO)
    return data


def job_workdir(
    scratch: Path, name: str, data: Path, changes: dict[str, Any], sft_steps: int, grpo_steps: int
) -> Path:
    """A workdir for one training-stage run: `data` linked in, the demo spec with these step
    counts, no quick evals, no time budget and the `cpu` fields in `changes`."""
    import yaml

    workdir = scratch / f"job-{name}"
    workdir.mkdir()
    (workdir / "data").symlink_to(data)
    spec = yaml.safe_load(SPEC.read_text())
    spec["cpu"].update(sft_steps=sft_steps, grpo_steps=grpo_steps, eval_rows=0, time_budget_s=None)
    spec["cpu"].update(changes)
    (workdir / "spec.yaml").write_text(yaml.safe_dump(spec))
    return workdir


def job_peaks(scratch: Path, sft_steps: int, grpo_steps: int, names: list[str]) -> dict[str, Any]:
    """The training stage once per `JOB_RUNS` entry in `names`, on one generated dataset:
    each run's peak RSS per phase, its resident set and peak after every GRPO step, and its
    GRPO seconds."""
    data = generate_data(scratch)
    runs: dict[str, Any] = {}
    for name in names:
        workdir = job_workdir(scratch, name, data, JOB_RUNS[name], sft_steps, grpo_steps)
        command = [sys.executable, "-m", "training.jobs.entry", "--spec", "spec.yaml"]
        command += ["--run-key", f"mem-{name}", "--backend", "cpu", "--workdir", str(workdir)]
        started = time.perf_counter()
        subprocess.run(command, check=True, cwd=workdir, capture_output=True, text=True)
        report = json.loads((workdir / "cpu_report.json").read_text())
        runs[name] = {
            "cpu": JOB_RUNS[name],
            "wall_s": round(time.perf_counter() - started, 1),
            "peak_rss_gib": report["peak_rss_gib"],
            "resident_after_gib": report["resident_after_gib"],
            "grpo_rss_gib_per_step": report["grpo"].get("rss_gib"),
            "grpo_peak_rss_gib_per_step": report["grpo"].get("peak_rss_gib"),
            "grpo_s": round(report["timings"]["grpo_s"], 1),
            "rewards": report["grpo"]["rewards"],
        }
        print(f"{name}: {runs[name]}", flush=True)
    return {"sft_steps": sft_steps, "grpo_steps": grpo_steps, "dataset_rows": 600, **runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4, help="GRPO prompts in the step.")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    parser.add_argument("--out", type=Path, help="Where the JSON goes (see above).")
    parser.add_argument("--job", action="store_true", help="Compare whole training runs.")
    parser.add_argument("--sft-steps", type=int, default=10, help="--job: SFT steps first.")
    parser.add_argument("--grpo-steps", type=int, default=4, help="--job: GRPO steps.")
    parser.add_argument(
        "--job-runs",
        nargs="+",
        choices=sorted(JOB_RUNS),
        default=["micro_batches_1", "micro_batches_2"],
        help="--job: which runs (each one changes the demo spec's cpu section).",
    )
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    from training.cpu_backend.compute_dtype import choose, cpu_flags

    dtype = choose(args.dtype, cpu_flags()).dtype
    if args.variant:  # a child: one variant, its figures on stdout's last line
        print(json.dumps(variant(args.variant, args.scratch, dtype)))
        return

    from serving.engine.cpu_dtype import cpu_facts

    if args.job:
        with tempfile.TemporaryDirectory(prefix="bench-grpo-job-") as folder:
            job = job_peaks(Path(folder), args.sft_steps, args.grpo_steps, args.job_runs)
        write(args.out or JOB_RESULTS, {"machine": cpu_facts(), "dtype": dtype, **job})
        return
    with tempfile.TemporaryDirectory(prefix="bench-grpo-mem-") as folder:
        scratch = Path(folder)
        rollouts = generate(scratch, args.prompts, dtype)
        figures: dict[str, Any] = {}
        for name in VARIANTS:
            command = [sys.executable, __file__, "--variant", name, "--scratch", str(scratch)]
            command += ["--dtype", dtype]
            done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO)
            figures[name] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{name}: {figures[name]}", flush=True)
        summed = torch.load(scratch / "summed.grads.pt")
        differences = {}
        for name in VARIANTS[1:]:
            grads = torch.load(scratch / f"{name}.grads.pt")
            differences[name] = max(
                float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))
                for a, b in zip(grads, summed, strict=True)
            )
    report: dict[str, Any] = {
        "machine": cpu_facts(),
        "dtype": dtype,
        "step": rollouts,
        **figures,
        "saves_gib_against_summed": {
            name: round(figures["summed"]["step_adds_gib"] - figures[name]["step_adds_gib"], 3)
            for name in VARIANTS[1:]
        },
        "gradient_max_relative_difference_against_summed": differences,
    }
    write(args.out or RESULTS, report)


def write(out: Path, report: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
