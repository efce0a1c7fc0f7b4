"""The process's resident memory: read it, give freed pages back, and log it per step.

The CPU stage runs SFT, GRPO and the evaluations in one process on a 24 GiB machine whose
target is a peak under 8 GiB. Each phase builds its own model, optimizer and caches; once it
returns they are garbage, but glibc keeps freed pages in its arenas, so without a trim the
next phase stacks on top (measured: 9.3 GB during GRPO after SFT in one process, against
5.2 GB for GRPO alone). Within GRPO each step builds a fresh graph over a different number
of sampled tokens, and the peak climbs from step to step; `MemoryCallback` records it per
step (`memory/rss_gib`, `memory/peak_gib` in the step's logs) so the step that sets the peak
can be read beside its token count. (A trim after every step was tried: the resident set
between steps fell, 5.1 to 3.2 GB, the peak did not; docs/parts/cpu_backend.md.) What
stops the climb is `set_mmap_threshold`: big blocks in their own mappings, given back when
freed (GRPO peak 10.12 -> 8.93 GiB over 8 steps), at 1.36-1.43x the gradient steps' time,
so it is a setting (`cpu.malloc_mmap_threshold_mib`), off by default.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
from typing import Any

from transformers import TrainerCallback

#: mallopt's parameter number for the mmap threshold (glibc's malloc.h, M_MMAP_THRESHOLD)
_M_MMAP_THRESHOLD = -3

RSS_KEY = "memory/rss_gib"
PEAK_KEY = "memory/peak_gib"


def status_gib(keys: tuple[str, ...] = ("VmHWM:", "VmRSS:")) -> dict[str, float]:
    """Those `/proc/self/status` lines in GiB (empty where there is no procfs)."""
    found: dict[str, float] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                key = line.split(maxsplit=1)[0] if line.strip() else ""
                if key in keys:
                    found[key] = round(int(line.split()[1]) / 1024**2, 3)
    except OSError:
        pass
    return found


def trim() -> None:
    """Collect garbage and hand glibc's free pages back to the system (no-op off glibc)."""
    gc.collect()
    release_free_pages()


def release_free_pages() -> None:
    """Hand glibc's free heap pages back to the system (`malloc_trim`; no-op off glibc),
    without a garbage collection: cheap enough between the phases of one GRPO step.

    Why between phases: measured in a GRPO step of the demo spec (2026-12-06,
    `benchmarks/bench_grpo_step_memory.py --phases`), the tensors alive after generation
    were 1.8 GiB but the resident set 3.3 GiB; after the reference log-probabilities,
    1.8 and 4.0; each phase's freed blocks stayed resident as holes the next phase's
    differently sized tensors did not fit, so the phases stacked up to the step's peak."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def set_mmap_threshold(mib: float | None) -> bool:
    """Serve every allocation of at least `mib` MiB from its own mmap, so that freeing it gives
    its pages straight back (None: leave glibc's default). Returns whether glibc took it.

    Why: glibc starts at 128 KiB but raises the threshold each time a mapped block is freed,
    up to 32 MiB, so after the first steps a GRPO step's activations and gradients (tens of
    MiB each, different sizes every step) land in the heap, where freed holes of the wrong
    size stay resident and the next step's tensors go on top. Setting it also turns that
    raising off. Costs a page fault per fresh page of each such tensor (measured in
    docs/parts/cpu_backend.md)."""
    if mib is None:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(mib * 2**20)))
    except (OSError, AttributeError):  # not glibc: nothing to set
        return False


def release_memory(resident: dict[str, float] | None = None, phase: str = "") -> float:
    """Free what a finished phase left behind and return the process's peak RSS so far (GiB);
    `resident[phase]` gets what stays resident after the trim."""
    trim()
    status = status_gib()
    if resident is not None and phase:
        resident[phase] = status.get("VmRSS:", 0.0)
    return status.get("VmHWM:", 0.0)


class MemoryCallback(TrainerCallback):
    """After each optimizer step, the resident set and the peak so far go into that step's
    logs, so the climb is in the run's metrics, not guessed at.

    It must come before the callbacks that forward logs (the trainer calls them in order)."""

    def __init__(self, release_after_step: bool = False, collect_after_step: bool = True) -> None:
        """`collect_after_step`: with `release_after_step`, run Python's collector first (off
        only where a benchmark measures what it does: `bench_grpo_phase_memory.py`)."""
        self._last: dict[str, float] = {}
        self.release_after_step = release_after_step
        self.collect_after_step = collect_after_step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        status = status_gib()
        self._last = {RSS_KEY: status.get("VmRSS:", 0.0), PEAK_KEY: status.get("VmHWM:", 0.0)}
        if self.release_after_step:
            # the step's autograd graphs that wait in reference cycles for Python's collector,
            # then every free page, before the next generation (measured: without the
            # collection glibc's live bytes after a step grew 3.10 -> 3.29 -> 4.69 GiB over
            # three steps, with it 3.02, 2.64, 3.07: grpo_phase_memory*.json)
            if self.collect_after_step:
                gc.collect()
            release_free_pages()
        return control

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> Any:
        if logs is None or not self._last or "train_runtime" in logs:
            return control
        logs.update(self._last)
        # the trainer copied `logs` into its history before calling back: the history is what
        # checkpoints keep and the run's report reads, so the readings go there too
        history = getattr(state, "log_history", None)
        if history and history[-1].get("step") == getattr(state, "global_step", None):
            history[-1].update(self._last)
        return control
