"""MLflow logging for the CPU backend, in the project's fixed namespaces.

`train/sft/...` (SFT), `train/...` (GRPO: reward, KL, clip ratio, tool calls, the format-drift
rate, speed), `eval/<stage>/...` (the quick held-out eval before training, after SFT and
after GRPO). Nothing is logged when `MLFLOW_TRACKING_URI` is unset; a run named by
`MLFLOW_RUN_ID` (the DAG's) is continued instead of starting a new one.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from training.checkpoints.layout import PROGRESS_FILE
from training.spec.model import TrainingSpec


class Tracker:
    """A thin, optional MLflow run."""

    def __init__(self, spec: TrainingSpec) -> None:
        self.spec = spec
        self.enabled = bool(os.environ.get("MLFLOW_TRACKING_URI"))
        self._mlflow: Any = None

    def __enter__(self) -> Tracker:
        if not self.enabled:
            return self
        import mlflow

        self._mlflow = mlflow
        # the env names the server; binding it here wins over any URI an earlier caller in
        # this process set globally
        mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
        run_id = os.environ.get("MLFLOW_RUN_ID") or None
        if run_id is None:
            mlflow.set_experiment(self.spec.tracking.experiment)
        mlflow.start_run(run_id=run_id, run_name=None if run_id else self.spec.name)
        mlflow.log_params(
            {
                "backend": "cpu-trl",
                "spec_name": self.spec.name,
                "spec_hash": self.spec.spec_hash(),
                "call_format": self.spec.model.call_format,
                "loss": self.spec.algorithm.loss,
                "rollout_n": self.spec.rollout.n,
                "grpo_steps": self.spec.cpu.grpo_steps,
                "sft_steps": self.spec.cpu.sft_steps,
            }
        )
        return self

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        if self._mlflow is None:
            return
        clean = {k: float(v) for k, v in metrics.items() if math.isfinite(float(v))}
        if clean:
            self._mlflow.log_metrics(clean, step=step)

    def log_artifacts(self, directory: Any, artifact_path: str) -> None:
        if self._mlflow is None or not directory.is_dir():
            return
        self._mlflow.log_artifacts(str(directory), artifact_path)

    def log_artifact(self, path: Any, artifact_path: str) -> None:
        if self._mlflow is None or not path.is_file():
            return
        self._mlflow.log_artifact(str(path), artifact_path)

    def __exit__(self, *exc: object) -> None:
        if self._mlflow is not None:
            self._mlflow.end_run(status="FAILED" if exc[0] else "FINISHED")
            self._mlflow = None


class LogCallback(TrainerCallback):
    """Trainer logs -> `namespace/<key>` at the trainer's global step."""

    def __init__(self, tracker: Tracker, namespace: str) -> None:
        self.tracker = tracker
        self.namespace = namespace

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> Any:
        metrics = {
            f"{self.namespace}/{key}": float(value)
            for key, value in (logs or {}).items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        }
        self.tracker.log(metrics, step=state.global_step)
        return control


class ProgressCallback(TrainerCallback):
    """Trainer logs -> `run_dir/progress.json` (phase, step, of, loss or reward), replaced
    atomically on every log. On AVX2 a 58-step SFT runs 15 minutes between its checkpoints;
    without this a user watching the demo saw nothing for that long."""

    def __init__(self, run_dir: Path, phase: str) -> None:
        self.path = run_dir / PROGRESS_FILE
        self.phase = phase

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> Any:
        logs = logs or {}
        record: dict[str, Any] = {
            "phase": self.phase,
            "step": int(state.global_step),
            "of": int(state.max_steps),
        }
        for key in ("loss", "reward"):
            value = logs.get(key)
            if isinstance(value, int | float) and math.isfinite(value):
                record[key] = round(float(value), 4)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(json.dumps(record), encoding="utf-8")
        partial.replace(self.path)
        return control
