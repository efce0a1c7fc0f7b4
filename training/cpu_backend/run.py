"""`run_local(spec, workdir)`: the whole CPU training stage, resumable at every point.

Order: resolve the base model (`tiny://<call_format>` builds the tiny Qwen3 locally), start
a mock-mode MCP server on loopback (or use `tools.server_url`), quick eval of the base
model, SFT warm start, quick eval, the format guard's verdict on it (`format_guard.py`:
GRPO, or more SFT in GRPO's place, or neither), GRPO, quick eval, export the final model as
a Hugging Face directory, write the run manifest last. Each finished piece leaves a file behind
(`sft/final/COMPLETE`, `global_step_N/COMPLETE`, `eval_<stage>.json`), so a killed run
started again skips what is done and continues the rest from its last checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from serving.mcp_client.base import TOKEN_ENV
from serving.toolcalls import using_registry
from training.cpu_backend import candidate_choice, format_guard
from training.cpu_backend.budget import MIN_SFT_STEPS, BudgetPlan, pinned_plan
from training.cpu_backend.compute_dtype import DtypeChoice, pinned_choice
from training.cpu_backend.episodes import EpisodeSettings, cpu_renderer, list_tools
from training.cpu_backend.export import export_model
from training.cpu_backend.grpo import ROLLOUTS_FILE, GrpoResult, run_grpo
from training.cpu_backend.huge_pages import huge_page_note, huge_page_state
from training.cpu_backend.memory import release_memory, set_mmap_threshold
from training.cpu_backend.onednn_cache import size_primitive_cache
from training.cpu_backend.plots import write_all
from training.cpu_backend.precision import torch_dtype
from training.cpu_backend.quick_eval import case_results, evaluate, report_view
from training.cpu_backend.replay import sft_replay
from training.cpu_backend.rollout_budget import RolloutBudget, check_budget, measure_budget
from training.cpu_backend.sft import (
    SftDeadline,
    SftResult,
    ToolSchema,
    probe_sft_step,
    run_sft,
    trained_rows,
)
from training.cpu_backend.tracking import LogCallback, ProgressCallback, Tracker
from training.data.packs.truth import dataset_registry
from training.evaluation.metrics import HEADLINE_METRICS
from training.spec.model import TrainingSpec
from training.spec.resolve import resolve_model, resolve_paths

logger = logging.getLogger(__name__)

REPORT = "cpu_report.json"
"""Written to the workdir beside the job's `result.json`: timings, speeds, losses, rewards
and the quick eval before training, after SFT and after GRPO."""
PLOTS = "plots"
"""PNGs beside the report (`plots.py`), also logged to the run's MLflow artifacts."""


@contextmanager
def tool_server(spec: TrainingSpec) -> Iterator[str]:
    """The MCP endpoint for the run: a private server in the spec's tool mode (mock, replay
    of `tools.store`, live over `tools.sources`, or real), or the spec's URL."""
    with served_tools(spec) as (url, _token, _usage):
        yield url


@contextmanager
def served_tools(
    spec: TrainingSpec,
) -> Iterator[tuple[str, str | None, Callable[[], dict[str, Any]]]]:
    """`tool_server`, the bearer token its clients send, and what the run's tool server
    answered so far (mode, store digest, calls per tool) for `cpu_report.json`: the record
    that the rollouts and quick evals reached the spec's tools and nothing else (a pack run:
    the replay of its store, never the user's server). An external server's calls are not
    counted here.

    The token: a server started here takes TOOLRL_MCP_TOKEN from the environment when set
    (on a Ray node of a deployment it is), so its clients must send the same one; the spec's
    external server is the project's own, which requires that token too. Without it every
    call of a job on the compose stack answered 401."""
    token = os.environ.get(TOKEN_ENV) or None
    if spec.cpu.mcp == "external":
        external: dict[str, Any] = {"server": "external", "mode": spec.tools.mode}
        yield spec.tools.server_url, token, lambda: external
        return
    from serving.mcp_server.config import ServerConfig
    from serving.mcp_server.server import start

    config = ServerConfig(
        mode=spec.tools.mode,
        store=Path(spec.tools.store) if spec.tools.store else None,
        sources=Path(spec.tools.sources) if spec.tools.sources else None,
        port=0,
        workers=1,
        log_level="warning",
    )
    with start(config) as server:

        def usage() -> dict[str, Any]:
            tools = server.metrics.snapshot()["tools"]
            return {
                "server": "embedded",
                "mode": spec.tools.mode,
                "store_digest": server.replay.digest if server.replay else None,
                "calls": {name: int(t["calls"]) for name, t in tools.items()},
            }

        yield server.url, config.resolved_token(), usage


def eval_rows(spec: TrainingSpec) -> list[dict[Any, Any]]:
    """A seeded sample of the held-out split (the same rows for every stage)."""
    if spec.cpu.eval_rows == 0:
        return []
    frame = pd.read_parquet(spec.data.test_files[0])
    records = frame.to_dict("records")
    random.Random(spec.cpu.seed).shuffle(records)
    return records[: spec.cpu.eval_rows]


def quick_eval(
    spec: TrainingSpec,
    model_dir: Path,
    rows: list[dict[str, Any]],
    mcp_url: str,
    cache_file: Path,
    mcp_token: str | None = None,
) -> dict[str, Any]:
    """The quick eval of one stage, cached in `cache_file` (a resumed run reuses it)."""
    if cache_file.is_file():
        cached: dict[str, Any] = json.loads(cache_file.read_text(encoding="utf-8"))
        return cached
    if not rows:
        return {}
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch_dtype(spec.cpu.dtype))
    reward_config = spec.reward.model_copy(update={"call_format": spec.model.call_format})
    settings = EpisodeSettings(
        max_turns=spec.rollout.max_turns,
        max_tokens=spec.cpu.eval_max_new_tokens,
        max_rows=spec.cpu.eval_batch_size,
        call_format=spec.model.call_format,
    )
    payload = evaluate(
        model,
        cpu_renderer(tokenizer, spec.model.enable_thinking),
        rows,
        mcp_url,
        settings,
        reward_config,
        spec.cpu.threads,
        mcp_token,
    )
    _write_json(cache_file, payload)
    return payload


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)


def _dataset_version(spec: TrainingSpec) -> str | None:
    if spec.data.dataset_version:
        return spec.data.dataset_version
    manifest = Path(spec.data.train_files[0]).parent / "manifest.json"
    try:
        version = json.loads(manifest.read_text(encoding="utf-8")).get("dataset_version")
    except (OSError, ValueError):
        return None
    return str(version) if version else None


def _eval_metrics(stage: str, payload: dict[str, Any]) -> dict[str, float]:
    keys = (*(key for key, _ in HEADLINE_METRICS), "malformed_call_rate", "mean_reward", "seconds")
    return {
        f"eval/{stage}/{k}": float(payload[k])
        for k in keys
        if isinstance(payload.get(k), int | float)
    }


def rollout_budget(spec: TrainingSpec, model_dir: Path, train_file: Path) -> RolloutBudget:
    """Every train row's reference rollout against `cpu.max_completion_length`, measured
    before any training so a limit that would cut them fails in seconds, not after SFT."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    renderer = cpu_renderer(tokenizer, spec.model.enable_thinking)
    columns = ["prompt", "reward_model", "language", "category"]
    rows = pd.read_parquet(train_file, columns=columns).to_dict("records")
    budget = measure_budget(renderer, rows, spec.cpu.max_completion_length)
    logger.info(
        "rollout budget: %d of %d train rows fit in %d tokens (longest reference %d)",
        budget.rows - budget.truncated,
        budget.rows,
        budget.limit,
        budget.longest,
    )
    return budget


def _pinned_run(spec: TrainingSpec, workdir: Path) -> tuple[TrainingSpec, Path, DtypeChoice]:
    """The spec with paths resolved against `workdir` and the dtype pinned in the run
    directory when it started."""
    workdir.mkdir(parents=True, exist_ok=True)
    run_dir = Path(spec.checkpoint.run_dir)
    run_dir = run_dir if run_dir.is_absolute() else workdir / run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = resolve_paths(spec, workdir)
    precision = pinned_choice(spec.cpu.dtype, run_dir)
    spec = spec.model_copy(update={"cpu": spec.cpu.model_copy(update={"dtype": precision.dtype})})
    return spec, run_dir, precision


def _budgeted(
    spec: TrainingSpec, run_dir: Path, base: Path, train_file: Path, schemas: list[ToolSchema]
) -> tuple[TrainingSpec, BudgetPlan | None]:
    """With `cpu.time_budget_s`, the spec's step counts cut to the plan pinned when the run
    started; a new plan times SFT steps here first (`probe_sft_step`, budget.py)."""
    if spec.cpu.time_budget_s is None:
        return spec, None
    plan = pinned_plan(
        spec.cpu,
        spec.cpu.time_budget_s,
        spec.cpu.dtype,
        run_dir,
        measure=lambda: probe_sft_step(spec, base, train_file, schemas),
    )
    return spec.model_copy(update={"cpu": plan.apply(spec.cpu)}), plan


def _sft_deadline(plan: BudgetPlan | None) -> list[SftDeadline]:
    """SFT's time limit where a budget planned the run (none without one)."""
    seconds = plan.sft_deadline_s() if plan else None
    if plan is None or seconds is None:
        return []
    return [SftDeadline(seconds, min(MIN_SFT_STEPS, plan.sft_steps))]


def _result(
    spec: TrainingSpec,
    spec_hash: str,
    run_dir: Path,
    model_dir: Path,
    sft: SftResult,
    grpo: GrpoResult,
    verdict: format_guard.FormatVerdict,
    choice: candidate_choice.CandidateChoice | None = None,
) -> dict[str, Any]:
    """`result.json`: what the DAG and the gate read."""
    status = (
        "drifted"
        if grpo.drift_stopped
        else ("succeeded" if grpo.final_step >= grpo.planned_steps else "incomplete")
    )
    if verdict.action == "extend":
        status = "sft_only"  # complete: GRPO's steps went to SFT (format_guard.py)
    last_rate = grpo.malformed_history[-1] if grpo.malformed_history else 0.0
    result: dict[str, Any] = {
        "schema_version": 1,
        "status": status,
        "final_step": grpo.final_step,
        "planned_step": grpo.planned_steps,
        "spec_hash": spec_hash,
        "dataset_version": _dataset_version(spec),
        "checkpoint_dir": str(run_dir),
        "merged_model_dir": str(model_dir),
        "candidate_stage": choice.stage if choice else None,
        "drift": {
            "malformed_rate": last_rate,
            "max_malformed_rate": spec.drift.max_malformed_rate,
            "window": float(spec.drift.window),
            **(
                {"margin_over_start": spec.drift.margin_over_start}
                if spec.drift.margin_over_start is not None
                else {}
            ),
            "stopped": float(grpo.drift_stopped),
        },
        "message": (
            f"cpu-trl: sft {sft.steps} steps, grpo {grpo.steps_trained} steps this run "
            f"(resumed from {grpo.resumed_from}); report in {REPORT}"
            + ("" if verdict.action == "grpo" else f". {verdict.reason}")
            + (f". {choice.reason}" if choice and choice.stage == "sft" else "")
        ),
    }
    return result


def _grpo_report(grpo: GrpoResult, budget: RolloutBudget, run_dir: Path) -> dict[str, Any]:
    return {
        "rollout_budget": budget.as_dict(),
        "steps_trained": grpo.steps_trained,
        "flat_batches": grpo.flat_batches,
        "rewards": grpo.rewards,
        "reward_stds": grpo.reward_stds,
        "zero_std_fractions": grpo.zero_std_fractions,
        "resampling": grpo.resampling,
        "sft_replay_losses": grpo.sft_replay_losses,
        "rss_gib": grpo.rss_gib,
        "peak_rss_gib": grpo.peak_rss_gib,
        "setup_s": round(grpo.setup_seconds, 2),
        "step_s": [round(seconds, 2) for seconds in grpo.step_seconds],
        "malformed_history": grpo.malformed_history,
        "prompt_pool": grpo.prompt_pool,
        "rollouts": str(run_dir / ROLLOUTS_FILE),
        # GRPO's own model: the run may hand on its SFT start instead (candidate_choice.py)
        "model_dir": str(grpo.model_dir),
    }


def skipped_grpo(model_dir: Path, planned: int) -> GrpoResult:
    """The GRPO phase the format guard did not run: no step, `model_dir` is the candidate."""
    return GrpoResult(model_dir, 0, planned, 0, 0.0, 0, False, None)


def _extend_sft(
    spec: TrainingSpec,
    verdict: format_guard.FormatVerdict,
    sft: SftResult,
    train_file: Path,
    run_dir: Path,
    schemas: list[ToolSchema],
    tracker: Tracker,
) -> SftResult | None:
    """The format guard's extension (`extend`): more SFT from the SFT model, limited to
    GRPO's planned seconds under a budget; None when the verdict is `stop`."""
    if verdict.action != "extend":
        return None
    callbacks: list[Any] = [
        LogCallback(tracker, "train/sft_extension"),
        ProgressCallback(run_dir, "sft_extension"),
    ]
    if verdict.extend_deadline_s is not None:
        callbacks.append(SftDeadline(verdict.extend_deadline_s, 1))
    return run_sft(
        format_guard.extension_spec(spec, verdict),
        sft.model_dir,
        train_file,
        run_dir,
        schemas,
        callbacks,
        subdir=format_guard.EXTENSION_DIR,
    )


def _extension_report(extended: SftResult | None) -> dict[str, Any] | None:
    if extended is None:
        return None
    return {
        "steps": extended.steps,
        "seconds": extended.seconds,
        "first_loss": extended.first_loss,
        "last_loss": extended.last_loss,
        "model_dir": str(extended.model_dir),
    }


def run_local(spec: TrainingSpec, workdir: Path) -> dict[str, Any]:
    """Run (or resume) the CPU training stage; returns the result the DAG and gate read."""
    import torch

    torch.set_num_threads(spec.cpu.threads)
    torch.manual_seed(spec.cpu.seed)
    set_mmap_threshold(spec.cpu.malloc_mmap_threshold_mib)  # before the first model is built
    primitive_cache = size_primitive_cache(spec.cpu.onednn_primitive_cache)  # before any matmul
    note = huge_page_note(spec.cpu.huge_pages)
    if note:
        logger.warning(note)
    spec_hash = resolve_paths(spec, workdir).spec_hash()  # as written: dtype auto stays auto
    spec, run_dir, precision = _pinned_run(spec, workdir)
    train_file = Path(spec.data.train_files[0])
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    base = resolve_model(spec, workdir)
    timings["build_model_s"] = time.perf_counter() - clock
    # before any server or tracker starts: a budget that cuts rollouts fails in seconds
    budget = rollout_budget(spec, base, train_file)
    check_budget(budget, spec.cpu.max_truncated_fraction)
    with ExitStack() as stack:
        # a pack dataset's calls are judged by its tool snapshot (parser, reward, quick eval)
        stack.enter_context(using_registry(dataset_registry(train_file)))
        url, token, tool_usage = stack.enter_context(served_tools(spec))
        schemas: list[ToolSchema] = list_tools(url, token, timeout_s=spec.tools.timeout_s)
        spec, plan = _budgeted(spec, run_dir, base, train_file, schemas)
        tracker = stack.enter_context(Tracker(spec))  # logs the step counts the run trains
        rows = eval_rows(spec)

        evals: dict[str, dict[str, Any]] = {}
        evals["before"] = quick_eval(spec, base, rows, url, run_dir / "eval_before.json", token)
        resident: dict[str, float] = {}
        peaks: dict[str, float] = {"before": release_memory(resident, "before")}
        sft_callbacks = [LogCallback(tracker, "train/sft"), ProgressCallback(run_dir, "sft")]
        deadline = _sft_deadline(plan)
        sft = run_sft(spec, base, train_file, run_dir, schemas, [*sft_callbacks, *deadline])
        timings["sft_s"] = sft.seconds
        peaks["sft"] = release_memory(resident, "sft")
        if sft.model_dir != base:  # no SFT ran (continuing from a champion): nothing new
            evals["sft"] = quick_eval(
                spec, sft.model_dir, rows, url, run_dir / "eval_sft.json", token
            )
            release_memory(resident, "eval_sft")
        verdict = format_guard.judge(spec.cpu, evals.get("sft"), plan)
        logger.info("format guard: %s", verdict.reason)
        extended: SftResult | None = None
        choice: candidate_choice.CandidateChoice | None = None  # GRPO ran: which model to hand on
        if verdict.action == "grpo":
            grpo_callbacks = [LogCallback(tracker, "train"), ProgressCallback(run_dir, "grpo")]
            replay = sft_replay(spec, train_file, sft.model_dir, schemas)
            trained = (
                trained_rows(spec, train_file, spec.cpu.sft_steps, sft.steps)
                if spec.cpu.grpo_fresh_rows and sft.model_dir != base
                else frozenset()
            )
            grpo = run_grpo(
                spec,
                sft.model_dir,
                train_file,
                run_dir,
                url,
                grpo_callbacks,
                token,
                replay,
                trained,
            )
            timings["grpo_s"] = grpo.seconds
            peaks["grpo"] = release_memory(resident, "grpo")
            evals["grpo"] = quick_eval(
                spec, grpo.model_dir, rows, url, run_dir / "eval_grpo.json", token
            )
            choice = (
                candidate_choice.choose(case_results(evals["sft"]), case_results(evals["grpo"]))
                if "sft" in evals
                else candidate_choice.continued()
            )
            logger.info("candidate: %s", choice.reason)
        else:
            extended = _extend_sft(spec, verdict, sft, train_file, run_dir, schemas, tracker)
            if extended is not None:
                timings["sft_extension_s"] = extended.seconds
                peaks["sft_extension"] = release_memory(resident, "sft_extension")
                evals["sft_extended"] = quick_eval(
                    spec, extended.model_dir, rows, url, run_dir / "eval_sft_extended.json", token
                )
            grpo = skipped_grpo(
                extended.model_dir if extended else sft.model_dir,
                0 if extended else spec.cpu.grpo_steps,
            )
        timings["eval_s"] = sum(float(e.get("seconds", 0.0)) for e in evals.values())
        kept_sft = choice is not None and choice.stage == "sft"
        model_dir = export_model(sft.model_dir if kept_sft else grpo.model_dir, workdir / "model")

        speed = {
            "train/sft/steps_per_s": sft.steps_per_s,
            "train/sft/tokens_per_s": sft.tokens_per_s,
            "train/steps_per_s": grpo.steps_per_s,
            "train/tokens_per_s": grpo.tokens_per_s,
        }
        metrics: dict[str, float] = dict(speed)
        if choice is not None:
            metrics["candidate/grpo_model"] = float(choice.stage == "grpo")
        for stage, payload in evals.items():
            metrics.update(_eval_metrics(stage, payload))
        tracker.log(metrics, step=grpo.final_step)
        result = _result(spec, spec_hash, run_dir, model_dir, sft, grpo, verdict, choice)
        report: dict[str, Any] = {
            "result": result,
            "backend": "cpu-trl",
            "spec_name": spec.name,
            "resumed_from": {"sft": sft.resumed_from, "grpo": grpo.resumed_from},
            "sft": {
                "steps": sft.steps,
                "first_loss": sft.first_loss,
                "last_loss": sft.last_loss,
                "dropped_rows": sft.dropped_rows,
                "losses": [list(pair) for pair in sft.losses],
                "step_s": [round(seconds, 2) for seconds in sft.step_seconds],
                "deadline_s": deadline[0].seconds if deadline else None,
                "stopped_by_deadline_at": deadline[0].stopped_at if deadline else None,
                "lr_horizon": deadline[0].horizon if deadline else None,
            },
            "format_guard": {
                **verdict.as_dict(),
                "extension": _extension_report(extended),
            },
            "grpo": _grpo_report(grpo, budget, run_dir),
            "candidate": choice.as_dict() if choice else None,
            "compute_dtype": asdict(precision),
            "time_budget": asdict(plan) if plan else None,
            "timings": timings,
            "tools": {**tool_usage(), "listed": sorted(s["function"]["name"] for s in schemas)},
            "peak_rss_gib": peaks,
            "resident_after_gib": resident,
            "huge_pages": huge_page_state(),
            "onednn_primitive_cache": primitive_cache,
            "metrics": metrics,
            "evals": {stage: report_view(block) for stage, block in evals.items()},
        }
        report["plots"] = [str(p) for p in write_all(report, workdir / PLOTS)]
        tracker.log_artifacts(workdir / PLOTS, PLOTS)
        if (run_dir / ROLLOUTS_FILE).is_file():  # none when the format guard skipped GRPO
            tracker.log_artifact(run_dir / ROLLOUTS_FILE, "grpo")
        _write_json(workdir / REPORT, report)
    return result
