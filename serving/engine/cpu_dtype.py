"""Which dtype a CPU computes in fastest: bf16 only where it multiplies bf16 natively.

bf16 halves the memory traffic and, on AVX512-BF16 or AMX, runs matmuls 4-8x faster than
fp32. Elsewhere oneDNN emulates it: on a 2-core AVX2-only AMD EPYC one SFT step of the demo
took 343 s in bf16 against 27 s in float32 (`benchmarks/results/sft_step_avx2.json`). The
engine server (serving and the evaluation) and the CPU training backend both ask here, so a
machine without native bf16 never runs the slow path by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ComputeDtype = Literal["float32", "bfloat16"]
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


def choose(requested: str, flags: frozenset[str] | None = None) -> DtypeChoice:
    """`requested` as it runs on a CPU with `flags` (default: this machine's): an explicit
    dtype is kept (its reason says when bf16 is emulated), `auto` becomes bf16 only where
    it is native."""
    flags = cpu_flags() if flags is None else flags
    native = sorted(NATIVE_BF16_FLAGS & flags)
    if requested == "float32":
        return DtypeChoice(requested, "float32", "set explicitly")
    if requested == "bfloat16":
        reason = "set explicitly" + (
            f" (native: {', '.join(native)})"
            if native
            else "; this CPU has no native bf16, so it is emulated and runs about 10x slower "
            "than float32 here: use auto"
        )
        return DtypeChoice(requested, "bfloat16", reason)
    if requested != "auto":
        raise ValueError(f"dtype must be auto, float32 or bfloat16, not {requested!r}")
    if native:
        return DtypeChoice(requested, "bfloat16", f"auto: native bf16 ({', '.join(native)})")
    return DtypeChoice(
        requested,
        "float32",
        "auto: this CPU has no native bf16 (no avx512_bf16 or amx_bf16 flag), and emulated "
        "bf16 runs about 10x slower than float32",
    )


def cpu_facts() -> dict[str, object]:
    """What every CPU figure is recorded with: the model name, core count, the flags that
    decide its speed (bf16 native or not), the dtype `auto` picks, and the torch build."""
    import os
    import platform

    import torch

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = cpu_flags()
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    return {
        "model_name": model,
        "cpus": os.cpu_count(),
        "flags": sorted(f for f in flags if f in wanted),
        "auto_dtype": choose("auto", flags).dtype,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
