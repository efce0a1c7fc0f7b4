"""The Ray job driver: `python -m training.jobs.entry --spec S --run-key K --backend B`.

Every attempt runs the same steps, so a resubmitted job continues instead of restarting:
1. bring the newest *complete* checkpoint from S3 if the local run dir has nothing newer,
   and point verl's tracker at the newest complete step (never a half-written one);
2. train with `resume_mode=auto` (verl on GPU; the TRL CPU backend on CPU);
3. check the run reached its planned final step (a resume saved exactly at an epoch
   boundary can train 0 steps and exit 0), merge the final checkpoint to a Hugging Face
   directory, and write `result.json` for the next stages. A drifted or incomplete run still
   exits 0 (the gate rejects it with the reason); `--strict` makes it exit 3.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from serving.runtime.processes import signal_process_group, start_process_group, stop_process_group
from training.checkpoints.layout import (
    latest_complete_step,
    repair_tracker,
    step_dir_name,
    tracker_step,
)
from training.checkpoints.s3 import CheckpointStore, make_client
from training.jobs.result import TrainingResult
from training.spec.model import TrainingSpec, load_spec
from training.spec.resolve import resolve_model, resolve_paths

logger = logging.getLogger("toolrl.jobs")
EXIT_INCOMPLETE = 3
DRIFT_STOP_GRACE_S = 60.0
"""Time verl gets to exit after SIGTERM on drift (its Ray workers too) before SIGKILL."""


def restore_checkpoint(spec: TrainingSpec, run_dir: Path) -> int | None:
    local = latest_complete_step(run_dir)
    if spec.checkpoint.s3_uri:
        store = CheckpointStore(
            make_client(os.environ.get("MLFLOW_S3_ENDPOINT_URL")), spec.checkpoint.s3_uri
        )
        remote = store.complete_steps()
        if remote and (local is None or remote[-1] > local):
            logger.info("restoring step %d from %s", remote[-1], spec.checkpoint.s3_uri)
            store.download_latest(run_dir)
    step = repair_tracker(run_dir)
    logger.info("resuming from step %s", step if step is not None else "0 (fresh start)")
    return step


def planned_steps(spec: TrainingSpec, train_rows: int) -> int:
    """verl's step count: epochs x batches per epoch (its dataloader drops the last partial
    batch), unless total_training_steps caps it."""
    if spec.schedule.total_training_steps is not None:
        return spec.schedule.total_training_steps
    return spec.schedule.total_epochs * max(1, math.floor(train_rows / spec.data.train_batch_size))


def _count_rows(files: list[str]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def prepare_verl_spec(spec: TrainingSpec, workdir: Path) -> TrainingSpec:
    """The spec verl is given: data paths absolute under the workdir and a `tiny://` model
    built there (or the one already there: a warm-started model placed in
    `<workdir>/base_model` is used as is), as the CPU backend resolves them."""
    spec = resolve_paths(spec, workdir)
    model_dir = resolve_model(spec, workdir)
    return spec.model_copy(update={"model": spec.model.model_copy(update={"path": str(model_dir)})})


def run_verl(spec: TrainingSpec, workdir: Path, poll_s: float = 10.0) -> dict[str, float] | None:
    """Run verl's trainer; stop it if the format-drift guard fires. Returns the drift
    summary when the run was stopped for drift, else None (raises if verl fails)."""
    from training.jobs.drift_guard import DRIFT_DIR_ENV, DriftWatcher
    from training.spec.plan import plan

    validated = plan(spec, workdir)
    drift_dir = workdir / "drift"
    env = dict(os.environ)
    env[DRIFT_DIR_ENV] = str(drift_dir)
    if spec.checkpoint.s3_uri:
        env["TOOLRL_CHECKPOINT_S3_URI"] = spec.checkpoint.s3_uri
        env["TOOLRL_CHECKPOINT_KEEP"] = str(spec.checkpoint.keep)
    from serving.toolcalls.registry import SNAPSHOT_ENV
    from training.data.packs.truth import tool_snapshot_path

    snapshot = tool_snapshot_path(Path(spec.data.train_files[0]))
    if snapshot is not None:  # a pack dataset: the reward workers judge by its tools
        env[SNAPSHOT_ENV] = str(snapshot.resolve())
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        *validated.overrides,
        *worker_env_overrides(env),
    ]
    watcher = DriftWatcher(
        drift_dir,
        spec.data.train_batch_size * spec.rollout.n,
        spec.drift.max_malformed_rate,
        spec.drift.window,
        spec.drift.margin_over_start,
    )
    return supervise(command, env, watcher, poll_s)


def worker_env_overrides(env: dict[str, str]) -> list[str]:
    """verl's trainer starts its own Ray driver, whose actors (the trainer that uploads
    checkpoints, the reward workers that log format drift) do not inherit this process's
    environment: the settings they read travel in verl's `ray_init.runtime_env` instead.
    Non-secret names only, as in the job's own runtime_env."""
    from serving.toolcalls.registry import SNAPSHOT_ENV
    from training.jobs.drift_guard import DRIFT_DIR_ENV
    from training.jobs.submit import FORWARDED_ENV
    from training.spec.overrides import hydra_value

    names = (
        DRIFT_DIR_ENV,
        SNAPSHOT_ENV,
        "TOOLRL_CHECKPOINT_S3_URI",
        "TOOLRL_CHECKPOINT_KEEP",
        *FORWARDED_ENV,
    )
    return [
        f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}={hydra_value(env[name])}"
        for name in names
        if env.get(name)
    ]


def supervise(
    command: list[str], env: dict[str, str], watcher: Any, poll_s: float
) -> dict[str, float] | None:
    """Run `command`, polling the drift watcher; stop the process group on drift (verl's
    Ray workers included). On an exception (Ctrl-C) the group gets SIGTERM without a wait:
    whoever interrupted us may kill this driver soon after, and the group ends on its own."""
    process = start_process_group(command, env=env)
    try:
        while process.poll() is None:
            if watcher.poll():
                logger.error(
                    "format drift: malformed-call rate %s over the last steps; stopping training",
                    watcher.history[-watcher.window :],
                )
                stop_process_group(process, grace_s=DRIFT_STOP_GRACE_S)
                return dict(watcher.summary())
            time.sleep(poll_s)
    except BaseException:
        if process.poll() is None:
            signal_process_group(process, signal.SIGTERM)
        raise
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, command[:4])
    return None


def unmarked_steps_message(run_dir: Path, final: int) -> str:
    """Say so when verl saved steps that carry no completion marker: those are never trusted
    (not resumed from, not merged), and the usual cause is a replaced checkpoint callback."""
    saved = tracker_step(run_dir)
    if saved is None or saved <= final:
        return ""
    return (
        f"verl's tracker names step {saved} but the newest step with a completion marker is "
        f"{final}: the steps after it are not trusted. Keep trainer.checkpoint_callback_class "
        "pointing at training.checkpoints.callback.CheckpointUploader (or a subclass)."
    )


def merge_checkpoint(run_dir: Path, step: int, target: Path) -> Path:
    """verl's merger: FSDP shards of the final actor -> one Hugging Face directory."""
    actor = run_dir / step_dir_name(step) / "actor"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(actor),
            "--target_dir",
            str(target),
        ],
        check=True,
    )
    return target


def verl_result(spec: TrainingSpec, workdir: Path, run_dir: Path, spec_hash: str) -> TrainingResult:
    """After verl exits: the newest marked step is the final one (verl's tracker alone is not
    trusted); it is merged to a Hugging Face directory and compared with the planned step."""
    final = latest_complete_step(run_dir) or 0
    planned = planned_steps(spec, _count_rows(spec.data.train_files))
    merged = merge_checkpoint(run_dir, final, workdir / "merged") if final else None
    return TrainingResult(
        status="succeeded" if final >= planned else "incomplete",
        final_step=final,
        planned_step=planned,
        spec_hash=spec_hash,
        dataset_version=spec.data.dataset_version,
        checkpoint_dir=str(run_dir),
        merged_model_dir=str(merged) if merged else None,
        message=unmarked_steps_message(run_dir, final),
    )


def run(spec: TrainingSpec, workdir: Path, backend: str) -> TrainingResult:
    run_dir = Path(spec.checkpoint.run_dir)
    if not run_dir.is_absolute():
        run_dir = workdir / run_dir
        spec = spec.model_copy(
            update={"checkpoint": spec.checkpoint.model_copy(update={"run_dir": str(run_dir)})}
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    restore_checkpoint(spec, run_dir)
    if backend == "cpu":
        from training.cpu_backend.run import run_local

        outcome: dict[str, Any] = run_local(spec, workdir)
        result = TrainingResult.model_validate(outcome)
    else:
        spec_hash = spec.spec_hash()  # lineage names the user's spec, not the resolved paths
        spec = prepare_verl_spec(spec, workdir)
        run_verl(spec, workdir)
        result = verl_result(spec, workdir, run_dir, spec_hash)
    if result.status == "succeeded" and not result.reached_planned_step:
        result = result.model_copy(
            update={
                "status": "incomplete",
                "message": f"trained to step {result.final_step} of planned {result.planned_step}",
            }
        )
    result.write(workdir)
    return result


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--run-key", required=True)
    parser.add_argument("--backend", choices=["verl", "cpu"], default="verl")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument(
        "--strict",
        action="store_true",
        help="Exit 3 unless the run completed (succeeded, or sft_only). Without it, a "
        "drifted or incomplete run exits 0 once result.json is written: the gate, not the "
        "job, rejects such a candidate.",
    )
    return parser


def wants_huge_pages(argv: list[str]) -> bool:
    """Whether this job's process should run on 2 MiB pages: a CPU job whose spec asks
    (`cpu.huge_pages`). A spec that does not load answers no here; `main` reports it."""
    from training.spec.model import SpecError

    args, _ = _parser().parse_known_args(argv)
    if args.backend != "cpu":
        return False
    try:
        return load_spec(args.spec).cpu.huge_pages
    except SpecError:
        return False


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    result = run(load_spec(args.spec), args.workdir, args.backend)
    logger.info("training %s: step %d of %d", result.status, result.final_step, result.planned_step)
    if not result.complete:
        logger.warning("%s; the gate will reject this candidate", result.message or result.status)
    return EXIT_INCOMPLETE if args.strict and not result.complete else 0


if __name__ == "__main__":
    from training.cpu_backend.huge_pages import restart_with_huge_pages

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # before any torch work: both switches are read once, at start (huge_pages.py)
    restart_with_huge_pages("training.jobs.entry", sys.argv[1:], wants_huge_pages(sys.argv[1:]))
    raise SystemExit(main())
