"""A process that does what the job driver does at start (`restart_with_huge_pages`), then
allocates and touches a 64 MiB tensor and prints what it has: one JSON line per phase, so a
test sees the restart (same pid, a second line) and the switches the new process holds."""

from __future__ import annotations

import json
import os
import sys

from training.cpu_backend.huge_pages import RESTARTED, huge_page_state, restart_with_huge_pages


def main() -> None:
    print(json.dumps({"phase": "start", "pid": os.getpid()}), flush=True)
    restart_with_huge_pages("testkit.huge_page_probe", sys.argv[1:], wanted=sys.argv[1:] == ["on"])
    import torch

    block = torch.ones(64 * 2**20 // 4)
    state = huge_page_state()
    print(
        json.dumps(
            {
                "phase": "working",
                "pid": os.getpid(),
                "restarted": RESTARTED in os.environ,
                "sum": float(block.sum()),
                **state,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
