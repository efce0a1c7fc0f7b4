"""Format-drift guard for the verl path (verl issue 6252: malformed calls grow until the run
crashes).

verl's reward workers are separate Ray processes and verl exposes no per-step hook for
them, so the signal travels through files: with `TOOLRL_DRIFT_DIR` set, every scored
rollout appends `{"calls", "malformed"}` to `<dir>/<pid>.jsonl` (one small buffered line).
The job driver reads those files while verl runs, groups samples into steps of
`train_batch_size x rollout.n` rollouts, and stops the run when the malformed-call rate
stays above the bound (`is_drifting`: the threshold, or the first step's rate plus a margin)
for `window` consecutive steps. The result then says "drifted" and
names the last complete checkpoint, which precedes the collapse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from training.rewards.drift import is_drifting
from training.rewards.drift_log import DRIFT_DIR_ENV, record_sample

__all__ = ["DRIFT_DIR_ENV", "DriftWatcher", "record_sample"]


@dataclass
class DriftWatcher:
    directory: Path
    samples_per_step: int
    threshold: float
    window: int
    margin_over_start: float | None = None
    _offsets: dict[Path, int] = field(default_factory=dict)
    _pending: list[tuple[int, int]] = field(default_factory=list)
    history: list[float] = field(default_factory=list)

    def _read_new(self) -> None:
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob("*.jsonl")):
            with path.open() as handle:
                handle.seek(self._offsets.get(path, 0))
                while True:
                    line = handle.readline()
                    if not line.endswith("\n"):  # a line still being written: next time
                        break
                    self._offsets[path] = handle.tell()
                    try:
                        item = json.loads(line)
                        self._pending.append((int(item["calls"]), int(item["malformed"])))
                    except (ValueError, KeyError, TypeError):
                        continue

    def poll(self) -> bool:
        """Fold new samples into completed steps; True when the run is drifting."""
        self._read_new()
        while len(self._pending) >= self.samples_per_step:
            step, self._pending = (
                self._pending[: self.samples_per_step],
                self._pending[self.samples_per_step :],
            )
            calls = sum(c for c, _ in step)
            malformed = sum(m for _, m in step)
            self.history.append(malformed / calls if calls else 0.0)
        return is_drifting(self.history, self.threshold, self.window, self.margin_over_start)

    def summary(self) -> dict[str, float]:
        last = self.history[-1] if self.history else 0.0
        return {
            "steps_observed": float(len(self.history)),
            "last_malformed_rate": last,
            "threshold": self.threshold,
            "window": float(self.window),
        }
