"""The checkpoint layout both training paths write (verl's own):

    run_dir/latest_checkpointed_iteration.txt     # the last step saved, as text
    run_dir/global_step_N/actor/...               # model / optimizer / extra state
    run_dir/global_step_N/data.pt                 # dataloader position
    run_dir/global_step_N/_COMPLETE.json          # ours: written last; lists every file

Resume rule: resume from the highest step whose `_COMPLETE.json` exists and whose files
match it. A step directory without the marker is a save or upload that died midway and is
never resumed from (verl's own tracker file can point at it; we do not trust it alone).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRACKER = "latest_checkpointed_iteration.txt"
MARKER = "_COMPLETE.json"
STEP_DIR = re.compile(r"^global_step_(\d+)$")
#: The CPU backend's last logged step per phase in the run dir (written by
#: `training/cpu_backend/tracking.ProgressCallback`, read by the demo's progress watcher).
PROGRESS_FILE = "progress.json"


@dataclass(frozen=True)
class StepFiles:
    step: int
    files: dict[str, int]
    """Relative path -> size in bytes, for every file of the step (marker excluded)."""

    def marker_json(self, extra: dict[str, Any] | None = None) -> str:
        return json.dumps({"step": self.step, "files": self.files, **(extra or {})}, indent=1)


def step_dir_name(step: int) -> str:
    return f"global_step_{step}"


def parse_step(name: str) -> int | None:
    match = STEP_DIR.match(name)
    return int(match.group(1)) if match else None


def scan_step(step_dir: Path) -> StepFiles:
    step = parse_step(step_dir.name)
    if step is None:
        raise ValueError(f"{step_dir} is not a global_step_N directory")
    files = {
        str(p.relative_to(step_dir)): p.stat().st_size
        for p in sorted(step_dir.rglob("*"))
        if p.is_file() and p.name != MARKER
    }
    return StepFiles(step, files)


def mark_complete(step_dir: Path, extra: dict[str, Any] | None = None) -> StepFiles:
    """Write the marker last, after every file of the step is on disk."""
    files = scan_step(step_dir)
    tmp = step_dir / f".{MARKER}.tmp"
    tmp.write_text(files.marker_json(extra))
    tmp.replace(step_dir / MARKER)
    return files


def is_complete(step_dir: Path) -> bool:
    marker = step_dir / MARKER
    if not marker.is_file():
        return False
    try:
        recorded: dict[str, int] = json.loads(marker.read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return False
    return all(
        (step_dir / rel).is_file() and (step_dir / rel).stat().st_size == size
        for rel, size in recorded.items()
    )


def complete_steps(run_dir: Path) -> list[int]:
    if not run_dir.is_dir():
        return []
    steps = [parse_step(p.name) for p in run_dir.iterdir() if p.is_dir()]
    return sorted(s for s in steps if s is not None and is_complete(run_dir / step_dir_name(s)))


def latest_complete_step(run_dir: Path) -> int | None:
    steps = complete_steps(run_dir)
    return steps[-1] if steps else None


def tracker_step(run_dir: Path) -> int | None:
    """The step verl's own tracker names, or None when it is absent or unreadable."""
    try:
        return int((run_dir / TRACKER).read_text().strip())
    except (OSError, ValueError):
        return None


def write_tracker(run_dir: Path, step: int) -> None:
    tmp = run_dir / f".{TRACKER}.tmp"
    tmp.write_text(str(step))
    tmp.replace(run_dir / TRACKER)


def repair_tracker(run_dir: Path) -> int | None:
    """Point verl's tracker at the latest complete step (or remove it when there is none),
    so `resume_mode=auto` never resumes from a half-written directory."""
    step = latest_complete_step(run_dir)
    if step is None:
        (run_dir / TRACKER).unlink(missing_ok=True)
    else:
        write_tracker(run_dir, step)
    return step
