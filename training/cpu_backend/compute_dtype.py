"""The CPU backend's compute dtype for one run: chosen once (`serving/engine/cpu_dtype.py`:
bf16 only where the CPU has it natively) and pinned in the run directory.

Pinned because a run resumed on another machine must keep the dtype its checkpoints and
optimizer state were written with (a bf16 run's optimizer holds fp32 master weights, a
float32 run's does not).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

from serving.engine.cpu_dtype import DtypeChoice, choose, cpu_flags

logger = logging.getLogger(__name__)

PIN_FILE = "compute_dtype.json"
__all__ = ["PIN_FILE", "DtypeChoice", "choose", "cpu_flags", "pinned_choice"]


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
