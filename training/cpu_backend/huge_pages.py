"""2 MiB pages for the CPU training process: ask for them, and say whether it got them.

A CPU training step allocates tensors of tens to hundreds of MiB every step (the output
head's logits over a 49,152-token vocabulary, attention scores, gradients). glibc serves each
from a fresh mapping and the kernel faults it in 4 KiB at a time: in the step benchmark a
quarter of the CPU time was the kernel's. Where the kernel's transparent-huge-page mode is
`madvise` (the common default), a process gets 2 MiB pages only for memory it advises, and
two maintained switches do the advising:

- `THP_MEM_ALLOC_ENABLE=1`: torch's CPU allocator advises its blocks of 2 MiB and more. Read
  once, at torch's first allocation.
- `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (glibc 2.35+): malloc advises its heap and its
  mapped blocks. Read once, when the process starts.

Both must be in the environment before the process does any work, so the job driver starts
itself again with them (`restart_with_huge_pages`) when the spec asks (`cpu.huge_pages`).
Measured (`benchmarks/bench_huge_pages.py`, bf16 on a 2-core Xeon with AMX): the trainer's
own SFT steps 0.88x, step by step on the same batches over two alternating rounds, every
step faster (`huge_pages_trainer.json`); in the step benchmark, one run per arm, SFT step
0.78x, GRPO policy update 0.92x, generation 0.94x, peak resident set unchanged (7.43 ->
7.46 GiB, `huge_pages.json`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence

logger = logging.getLogger("toolrl.cpu.huge_pages")

TORCH_SWITCH = "THP_MEM_ALLOC_ENABLE"
TUNABLES = "GLIBC_TUNABLES"
GLIBC_HUGETLB = "glibc.malloc.hugetlb"
RESTARTED = "TOOLRL_HUGE_PAGES_RESTARTED"
"""Set in the restarted process: a second restart is never attempted, whatever happens."""
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_mode(path: str = THP_ENABLED) -> str | None:
    """The kernel's transparent-huge-page mode (`always`, `madvise` or `never`; None where
    the file is missing or unreadable)."""
    try:
        with open(path, encoding="ascii") as setting:
            text = setting.read()
    except (OSError, UnicodeDecodeError):
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def anon_huge_pages_kib(path: str = "/proc/self/smaps_rollup") -> int | None:
    """KiB of this process's anonymous memory on transparent huge pages (None: no procfs)."""
    try:
        with open(path, encoding="ascii") as rollup:
            for line in rollup:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):  # UnicodeDecodeError is a ValueError
        return None
    return 0


def huge_page_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to set (or change) so that a process started with `environ` advises its
    big blocks: empty when both switches are already on. A `GLIBC_TUNABLES` the user set is
    kept; only the huge-page tunable is added to it (or replaced in it)."""
    wanted: dict[str, str] = {}
    if environ.get(TORCH_SWITCH) != "1":
        wanted[TORCH_SWITCH] = "1"
    tunables = [t for t in environ.get(TUNABLES, "").split(":") if t]
    if f"{GLIBC_HUGETLB}=1" not in tunables:
        kept = [t for t in tunables if not t.startswith(f"{GLIBC_HUGETLB}=")]
        wanted[TUNABLES] = ":".join([*kept, f"{GLIBC_HUGETLB}=1"])
    return wanted


def should_restart(wanted: bool, environ: Mapping[str, str], mode: str | None) -> bool:
    """Restart only where it can help: asked for, the kernel in `madvise` mode (`always`
    gives huge pages unasked, `never` refuses them), a switch missing, and not restarted
    already."""
    missing = bool(huge_page_env(environ))
    return wanted and mode == "madvise" and missing and RESTARTED not in environ


def restart_with_huge_pages(module: str, argv: Sequence[str], wanted: bool) -> None:
    """Replace this process with `python -m module *argv` started with both switches on,
    where `should_restart` says so; otherwise return. Call it before any torch work and only
    from a `__main__` block: it never returns when it restarts."""
    if not should_restart(wanted, os.environ, thp_mode()):
        return
    env = {**os.environ, **huge_page_env(os.environ), RESTARTED: "1"}
    logger.info("restarting with 2 MiB pages (%s=1, %s=1)", TORCH_SWITCH, GLIBC_HUGETLB)
    sys.stdout.flush()
    sys.stderr.flush()
    # the same interpreter and arguments, as a list: nothing passes through a shell
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)  # noqa: S606


def huge_page_state() -> dict[str, object]:
    """What a run records: the kernel's mode, both switches as this process has them, and the
    KiB it holds on huge pages (0 with the switches on means the kernel gave none)."""
    tunables = os.environ.get(TUNABLES, "")
    return {
        "kernel_thp": thp_mode(),
        "torch_switch": os.environ.get(TORCH_SWITCH) == "1",
        "glibc_hugetlb": f"{GLIBC_HUGETLB}=1" in tunables.split(":"),
        "anon_huge_pages_kib": anon_huge_pages_kib(),
    }


def huge_page_note(wanted: bool) -> str | None:
    """A line for the run's log where the spec asks for huge pages and this process was
    started without them (`toolrl train local`, a notebook): what it costs and how to get
    them. None where there is nothing to say."""
    if not should_restart(wanted, os.environ, thp_mode()):
        return None
    switches = " ".join(f"{k}={v}" for k, v in huge_page_env(os.environ).items())
    return (
        "this process runs on 4 KiB pages (started without the huge-page switches; the job "
        f"driver sets them itself): start it with `{switches}` in its environment for a "
        "faster step (SFT 0.78x in bench_huge_pages.json), or set cpu.huge_pages: false to "
        "silence this"
    )
