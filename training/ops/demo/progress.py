"""Training milestones for the demo while the retraining DAG waits on its Ray job.

`airflow dags test` prints nothing between `wait_training` starting and ending: the trigger
polls the Ray Jobs API for the whole training stage (minutes on two cores). The run's
checkpoint folder is the contract both training backends write (`global_step_N/` for
GRPO/verl, `sft/global_step_N/` for the CPU warm start, `eval_<stage>.json` for the quick
evals), so watching it shows real progress without coupling the demo to the job's logs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from training.checkpoints.layout import PROGRESS_FILE, STEP_DIR
from training.cpu_backend.budget import PIN_FILE as BUDGET_PIN
from training.cpu_backend.format_guard import EXTENSION_DIR
from training.cpu_backend.plots import STAGES

_EVAL_STAGES = dict(STAGES)


def _steps(folder: Path) -> list[int]:
    try:
        names = [p.name for p in folder.iterdir() if p.is_dir()]
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in map(STEP_DIR.match, names) if m)


def _eval_line(path: Path, label: str) -> str:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        parseable = float(data["parseable_rate"])
        selection = float(data["tool_selection_accuracy"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"quick eval {label}: done ({path.name})"
    return f"quick eval {label}: parseable {parseable:.0%}, right tool {selection:.0%}"


def _pinned_totals(run: Path) -> dict[str, int]:
    """The step counts the job pinned for a time budget (`budget_plan.json`), which win over
    the demo's own estimate: the job plans from the step cost it timed where it runs."""
    try:
        plan = json.loads((run / BUDGET_PIN).read_text(encoding="utf-8"))
        return {"sft": int(plan["sft_steps"]), "grpo": int(plan["grpo_steps"])}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


_PHASES = {"sft": "SFT", "sft_extension": "more SFT (format guard)", "grpo": "GRPO"}
#: A running phase is reported at each tenth of its steps.
_PROGRESS_STEPS = 10


def _progress(run: Path) -> list[tuple[str, str]]:
    """The phase's latest logged step, as a milestone at each tenth of the phase."""
    try:
        data = json.loads((run / PROGRESS_FILE).read_text(encoding="utf-8"))
        phase, step, total = str(data["phase"]), int(data["step"]), int(data["of"])
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if total <= 0 or step <= 0 or step >= total:  # the checkpoint line reports the end
        return []
    tenth = step * _PROGRESS_STEPS // total
    figure = next((f"{k} {data[k]:.3g}" for k in ("reward", "loss") if k in data), "")
    label = _PHASES.get(phase, phase)
    message = f"{label} step {step}/{total}" + (f", {figure}" if figure else "")
    return [(f"{run}|progress|{phase}|{tenth}", message)]


class CheckpointWatcher:
    """Reports each new milestone under `root/*/checkpoints` once, in the order found."""

    def __init__(
        self,
        root: Path,
        say: Callable[[str], None],
        totals: dict[str, int] | None = None,
        interval_s: float = 5.0,
    ) -> None:
        self.root = root
        self.say = say
        self.totals = totals or {}
        self.interval_s = interval_s
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self, quiet: bool = False) -> list[str]:
        """New milestone messages since the last poll (also reported through `say` unless
        `quiet`)."""
        messages: list[str] = []
        for run in sorted(self.root.glob("*/checkpoints")):
            found: list[tuple[str, str]] = []
            totals = {**self.totals, **_pinned_totals(run)}
            total_sft, total_rl = totals.get("sft"), totals.get("grpo")
            for step in _steps(run / "sft"):
                of = f"/{total_sft}" if total_sft else ""
                found.append((f"{run}|sft|{step}", f"SFT checkpoint: step {step}{of}"))
            for step in _steps(run / EXTENSION_DIR):  # the format guard's extension
                found.append((f"{run}|more-sft|{step}", f"more SFT checkpoint: step {step}"))
            for step in _steps(run):
                of = f"/{total_rl}" if total_rl else ""
                found.append((f"{run}|rl|{step}", f"GRPO checkpoint: step {step}{of}"))
            found.extend(_progress(run))
            for stage, label in _EVAL_STAGES.items():
                path = run / f"eval_{stage}.json"
                if path.is_file():
                    found.append((f"{run}|eval|{stage}", _eval_line(path, label)))
            for key, message in found:
                if key not in self._seen:
                    self._seen.add(key)
                    messages.append(message)
        for message in messages if not quiet else []:
            self.say(message)
        return messages

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def __enter__(self) -> CheckpointWatcher:
        # earlier runs in the same workdir (a second `make demo`) are history, not progress
        self.poll(quiet=True)
        self._thread = threading.Thread(target=self._loop, name="demo-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
