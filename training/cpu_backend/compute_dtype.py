"""Which dtype the CPU backend computes in: `cpu.dtype: auto` asks the CPU, once per run.

bf16 is the demo's speed-up only where the CPU multiplies bf16 natively (AVX512-BF16 or
AMX). Elsewhere oneDNN emulates it, and the same SFT step runs an order of magnitude slower
than fp32 (measured on a 2-core AMD EPYC with AVX2 only: 343 s against 27 s,
`benchmarks/results/sft_step_avx2.json`), which turns the demo's 10-minute SFT into half a
day. So `auto` takes bf16 where it is native and fp32 everywhere else.

The choice is pinned in the run directory when the run starts: a run resumed on another
machine keeps the dtype its checkpoints and optimizer state were written with (a bf16 run's
optimizer holds fp32 master weights, a float32 run's does not).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

logger = logging.getLogger(__name__)

ComputeDtype = Literal["float32", "bfloat16"]
PIN_FILE = "compute_dtype.json"
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"""/proc/cpuinfo flags of x86 CPUs with bf16 matmul instructions."""


@dataclass(frozen=True)
class DtypeChoice:
    requested: str
    dtype: ComputeDtype
    reason: str


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's feature flags; empty where the file is absent (not Linux)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def choose(requested: str, flags: frozenset[str]) -> DtypeChoice:
    """`requested` as it runs on a CPU with `flags`: an explicit dtype is kept (with a
    warning when bf16 is emulated), `auto` becomes bf16 only where it is native."""
    native = sorted(NATIVE_BF16_FLAGS & flags)
    if requested == "float32":
        return DtypeChoice(requested, "float32", "set in the spec")
    if requested == "bfloat16":
        reason = "set in the spec" + (
            f" (native: {', '.join(native)})"
            if native
            else "; this CPU has no native bf16, so it is emulated and runs about 10x slower "
            "than float32 here: set cpu.dtype: auto"
        )
        return DtypeChoice(requested, "bfloat16", reason)
    if requested != "auto":
        raise ValueError(f"cpu.dtype must be auto, float32 or bfloat16, not {requested!r}")
    if native:
        return DtypeChoice(requested, "bfloat16", f"auto: native bf16 ({', '.join(native)})")
    return DtypeChoice(
        requested,
        "float32",
        "auto: this CPU has no native bf16 (no avx512_bf16 or amx_bf16 flag), and emulated "
        "bf16 runs about 10x slower than float32",
    )


def pinned_choice(
    requested: str, run_dir: Path, flags: frozenset[str] | None = None
) -> DtypeChoice:
    """The run's dtype: the one pinned in `run_dir` if the run started before, else chosen
    now and pinned. A pin that no longer matches the spec's explicit dtype is refused,
    since the checkpoints would be read with the wrong optimizer state."""
    pin = run_dir / PIN_FILE
    if pin.is_file():
        try:
            saved = json.loads(pin.read_text(encoding="utf-8"))
            earlier = DtypeChoice(str(saved["requested"]), saved["dtype"], str(saved["reason"]))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{pin} is unreadable ({error}); delete it to choose again") from error
        if earlier.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"{pin} names an unknown dtype {earlier.dtype!r}")
        if requested not in ("auto", earlier.dtype):
            raise ValueError(
                f"this run started in {earlier.dtype} ({pin}), and the spec now asks for "
                f"{requested}: use a new checkpoint.run_dir, or set cpu.dtype back"
            )
        logger.info("compute dtype %s, pinned when the run started (%s)", earlier.dtype, pin)
        return earlier
    choice = choose(requested, cpu_flags() if flags is None else flags)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = pin.with_name(f".{pin.name}.tmp")
    tmp.write_text(json.dumps(asdict(choice), indent=2), encoding="utf-8")
    tmp.replace(pin)
    log = (
        logger.warning
        if "emulated" in choice.reason and choice.dtype == "bfloat16"
        else logger.info
    )
    log("compute dtype %s: %s", choice.dtype, choice.reason)
    return choice
