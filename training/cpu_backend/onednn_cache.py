"""oneDNN's primitive cache, sized for a training run's many shapes.

On a bf16 host every matmul of the model runs as a oneDNN primitive, built for its exact
shapes and kept in a process-wide cache of 1,024 entries by default. A CPU training step
touches about 65 new shapes (each batch has its own lengths): measured with
`ONEDNN_VERBOSE=profile_create`, 1,938 distinct primitives over 30 SFT steps of the demo
spec. So the default cache is full after about 15 steps and from then on evicts a
primitive for every one it builds. Measured (`benchmarks/bench_sft_step_drift.py`, bf16,
AMX, the same 60 batches in every run, two pairs in opposite orders): with the default
the forward and backward of a step rose 1.13-1.20x from the run's first quarter to its last;
with room for 65,536 primitives it stayed flat (0.95-0.98x). But in `make demo` a capacity
of 16,384 left the step's rise in place and lifted the training peak from 7.4-7.6 GiB to
9.0 GiB (most likely the primitives it kept; one run), so the spec leaves oneDNN's default
(`cpu.onednn_primitive_cache: null`); the setting stays for runs with memory to spare.

oneDNN reads `ONEDNN_PRIMITIVE_CACHE_CAPACITY` once, when the process builds its first
primitive, so `size_primitive_cache` must run before any torch compute. float32 on an
AVX2 host runs its matmuls in MKL, not oneDNN, and the setting changes nothing there.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping

logger = logging.getLogger("toolrl.cpu.onednn_cache")

CAPACITY_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
ONEDNN_DEFAULT = 1024


def size_primitive_cache(
    capacity: int | None, environ: MutableMapping[str, str] = os.environ
) -> int:
    """Ask oneDNN for room for `capacity` primitives (None: leave its default) and return the
    capacity this process will have. A value already in the environment is the user's choice
    and wins, so one run can be compared against another from the shell. Call it before any
    torch compute: oneDNN reads the variable once, at its first primitive."""
    chosen = environ.get(CAPACITY_VARIABLE)
    if chosen is not None:
        try:
            return int(chosen)
        except ValueError:
            logger.warning(
                "%s=%r is not a whole number; oneDNN will fall back to its default (%d)",
                CAPACITY_VARIABLE,
                chosen,
                ONEDNN_DEFAULT,
            )
            return ONEDNN_DEFAULT
    if capacity is None:
        return ONEDNN_DEFAULT
    environ[CAPACITY_VARIABLE] = str(capacity)
    return capacity
