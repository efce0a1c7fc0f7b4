"""SFT's learning-rate schedule: a cosine whose end moves in when the time budget will cut SFT.

The time budget plans SFT's step count from a probe of three steps, and SFT's deadline
(`sft.SftDeadline`) stops it when the next step would finish late. A run's steps cost more
than the probe's (the services beside it, its own drift: `docs/parts/cpu_backend.md`), so
the deadline cut the AMX host's demos at 71-89% of their planned steps. With transformers'
`cosine_with_min_lr` over the planned count, SFT then stopped with its learning rate still at
0.13-0.28 of the peak, instead of at the floor of 0.1 it would have reached: the checkpoint
GRPO and the gate get is the one from the middle of the schedule.

`ShrinkingCosine` is that same schedule (the same warmup, cosine and floor, step for step
while nothing moves it) with a `horizon` the deadline can bring in, never past the planned
steps: each step, the deadline projects where it will stop from the time left and the recent
steps' cost, and the cosine ends there. The horizon follows the projection both ways: one
that could only move in would keep the earliest projection, and the earliest are the
noisiest (a first step that also starts the trainer). A later projection raises the rate a
little (at step 70, an end moved from 75 to 80 takes the factor from 0.11 to 0.14 of the
peak); where the deadline stops later than projected, the last steps train at the floor. It
is a callable object, so `LambdaLR.state_dict` saves its horizon with the checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

RECENT_STEPS = 10
"""Steps whose mean prices the steps left: recent enough to follow the drift of a run."""
MIN_MEASURED_STEPS = 3
"""Steps this process trains before its cost is trusted (the first holds the trainer's start)."""


class ShrinkingCosine:
    """transformers' `cosine_with_min_lr` (linear warmup, half a cosine down to
    `min_lr_ratio` of the peak) as a `LambdaLR` factor over `horizon` steps, which
    `end_at` can bring in. Past the horizon the factor stays at the floor
    (transformers' own would climb the cosine back up)."""

    def __init__(self, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> None:
        if total_steps < 1 or warmup_steps < 0:
            raise ValueError(f"a schedule needs steps: total {total_steps}, warmup {warmup_steps}")
        if not 0.0 <= min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be within [0, 1], not {min_lr_ratio}")
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.min_lr_ratio = min_lr_ratio
        self.horizon = total_steps

    def end_at(self, steps: int) -> int:
        """End the cosine at step `steps`, within the planned steps and past the warmup;
        returns the horizon in force."""
        self.horizon = max(min(self.total_steps, int(steps)), self.warmup_steps + 1)
        return self.horizon

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / max(1, self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.horizon - self.warmup_steps))
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cosine


def shrinking_scheduler(
    optimizer: Any, warmup_steps: int, total_steps: int, min_lr_ratio: float
) -> Any:
    """A `LambdaLR` on `optimizer` driven by one `ShrinkingCosine`."""
    from torch.optim.lr_scheduler import LambdaLR

    return LambdaLR(optimizer, ShrinkingCosine(warmup_steps, total_steps, min_lr_ratio))


def schedule_of(scheduler: Any) -> ShrinkingCosine | None:
    """The `ShrinkingCosine` that drives `scheduler`, or None (another schedule: nothing to
    move)."""
    for factor in getattr(scheduler, "lr_lambdas", ()):
        if isinstance(factor, ShrinkingCosine):
            return factor
    return None


def projected_last_step(
    step: int,
    done: int,
    step_ends: Sequence[float],
    started: float,
    seconds: float,
    min_steps: int,
) -> int | None:
    """The step SFT's deadline will stop at: `step` (the last finished, the `done`-th of this
    process) plus the steps that fit in the `seconds` left since `started`, each priced at
    the dearer of this process's mean step and its last `RECENT_STEPS` steps (`step_ends`:
    when each ended), so the projection errs early, where the cosine is already down, not
    late. Never before `min_steps`, where the deadline never stops; None until
    `MIN_MEASURED_STEPS` steps have ended."""
    if done < MIN_MEASURED_STEPS or not step_ends:
        return None
    elapsed = step_ends[-1] - started
    recent = step_ends[-RECENT_STEPS - 1 :]
    step_s = elapsed / done
    if len(recent) > 1:
        step_s = max(step_s, (recent[-1] - recent[0]) / (len(recent) - 1))
    if not (math.isfinite(step_s) and step_s > 0):
        return None
    left = max(0.0, seconds - elapsed)
    return max(min_steps, step + math.floor(left / step_s))
