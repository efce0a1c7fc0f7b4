"""The resident-memory readings and trims the CPU stage logs (`training/cpu_backend/memory.py`):
per GRPO step, `memory/rss_gib` and `memory/peak_gib` go into that step's logs."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from training.cpu_backend.memory import (
    PEAK_KEY,
    RSS_KEY,
    MemoryCallback,
    release_memory,
    status_gib,
)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads procfs")


@linux_only
def test_status_reads_the_resident_set_and_its_high_water_mark() -> None:
    status = status_gib()
    assert 0 < status["VmRSS:"] <= status["VmHWM:"]
    assert status_gib(("NoSuchKey:",)) == {}


@linux_only
def test_a_released_phase_records_what_stays_resident() -> None:
    resident: dict[str, float] = {}
    peak = release_memory(resident, "sft")
    assert 0 < resident["sft"] <= peak
    assert release_memory() >= peak  # a high-water mark never falls


@linux_only
def test_each_step_log_gets_the_readings_taken_after_that_step() -> None:
    callback = MemoryCallback()
    state = SimpleNamespace(global_step=1, log_history=[{"loss": 0.5, "step": 1}])
    control = SimpleNamespace()
    early: dict[str, float] = {"loss": 0.5}
    callback.on_log(None, state, control, logs=early)
    assert early == {"loss": 0.5}  # no step has ended yet: nothing to report
    held = bytearray(64 * 1024**2)  # 64 MiB resident across the step's end
    held[::4096] = b"x" * len(held[::4096])
    assert callback.on_step_end(None, state, control) is control
    logs: dict[str, float] = {"loss": 0.5}
    callback.on_log(None, state, control, logs=logs)
    assert 0.06 < logs[RSS_KEY] <= logs[PEAK_KEY]
    # the trainer's history (what checkpoints keep and the report reads) gets them too
    assert state.log_history[-1][RSS_KEY] == logs[RSS_KEY]
    summary: dict[str, float] = {"train_runtime": 3.0}
    callback.on_log(None, state, control, logs=summary)
    assert RSS_KEY not in summary  # the end-of-training summary is not a step
    del held


_MAPPED_AFTER = """
import ctypes, json, sys
from training.cpu_backend.memory import set_mmap_threshold


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
took = set_mmap_threshold(float(sys.argv[1])) if sys.argv[1] != "none" else None
# glibc maps a 1 MiB block at first; freeing that mapping raises its threshold past 1 MiB,
# so by default the same block comes from the heap next time (and stays there when freed)
libc.free(ctypes.c_void_p(libc.malloc(1 << 20)))
before = libc.mallinfo2().hblkhd
block = libc.malloc(1 << 20)
print(json.dumps({"took": took, "mapped": libc.mallinfo2().hblkhd - before}))
libc.free(ctypes.c_void_p(block))
"""


def _mapped_bytes(threshold: str) -> dict[str, object]:
    import json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _MAPPED_AFTER, threshold], capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout))


@linux_only
def test_a_set_threshold_serves_smaller_blocks_from_their_own_mapping() -> None:
    """The setting reaches glibc and stops its raising: a second 1 MiB block comes from the
    heap under the default, from its own mapping (given back on free) with the threshold at
    512 KiB (a fresh process each, since the setting is process-wide)."""
    assert _mapped_bytes("none") == {"took": None, "mapped": 0}
    fixed = _mapped_bytes("0.5")
    assert fixed["took"] is True
    assert int(str(fixed["mapped"])) >= 1 << 20


def test_no_threshold_leaves_the_allocator_alone() -> None:
    from training.cpu_backend.memory import set_mmap_threshold

    assert set_mmap_threshold(None) is False


_HOLES_RELEASED = """
import ctypes, json
from training.cpu_backend.memory import MemoryCallback, release_free_pages, status_gib

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
mode = __import__("sys").argv[1]
# 400 blocks of 96 KiB (under glibc's 128 KiB mmap threshold: from the heap), every page
# touched, then every other one freed: 19 MiB of holes between live blocks, which glibc's
# own trimming (only the heap's top) never gives back
blocks = [libc.malloc(96 * 1024) for _ in range(400)]
for block in blocks:
    ctypes.memset(block, 1, 96 * 1024)
for block in blocks[::2]:
    libc.free(ctypes.c_void_p(block))
before = status_gib()["VmRSS:"]
if mode == "callback":
    MemoryCallback(release_after_step=True).on_step_end(None, None, None)
elif mode == "release":
    release_free_pages()
print(json.dumps({"freed_mib": (before - status_gib()["VmRSS:"]) * 1024}))
"""


def _freed_mib(mode: str) -> float:
    import json
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _HOLES_RELEASED, mode], capture_output=True, text=True, check=True
    )
    return float(json.loads(done.stdout)["freed_mib"])


@linux_only
def test_free_pages_between_live_blocks_go_back_to_the_system() -> None:
    """What a GRPO phase frees stays resident as holes between live blocks; releasing them
    (between a step's phases, and by the step callback when asked) gives them back."""
    assert _freed_mib("none") < 2
    assert _freed_mib("release") > 12
    assert _freed_mib("callback") > 12


def test_the_step_end_release_collects_garbage_in_reference_cycles() -> None:
    """A step's autograd graphs can wait in reference cycles for Python's collector; the
    step-end release runs it (measured: live bytes after GRPO steps stopped growing)."""
    import gc
    import weakref

    class Node:
        other: object = None

    gc.disable()  # the collector must not run by itself in between
    try:
        first, second = Node(), Node()
        first.other, second.other = second, first
        alive = weakref.ref(first)
        del first, second
        MemoryCallback(release_after_step=False).on_step_end(None, None, None)
        assert alive() is not None  # no release asked: nothing collected
        MemoryCallback(release_after_step=True).on_step_end(None, None, None)
        assert alive() is None
    finally:
        gc.enable()
