"""A process that sizes oneDNN's primitive cache as the training process does
(`size_primitive_cache`, before any torch compute), builds more distinct convolution
primitives than oneDNN's default cache holds, then runs the first shape again. With
`ONEDNN_VERBOSE=profile_create` oneDNN prints one line per primitive it builds or finds,
so a test reads whether the first shape was still cached. Argument: the capacity to ask
for, or `none` for oneDNN's default."""

from __future__ import annotations

import sys

from training.cpu_backend.onednn_cache import size_primitive_cache

FIRST_HEIGHT = 1000
"""Tall enough that torch runs the convolution in oneDNN (small ones take another path)."""
SHAPES = 700
"""Each shape builds a convolution and a reorder: 1,400 entries, past the default 1,024."""
MARKER = "AGAIN"


def main() -> None:
    wanted = None if sys.argv[1] == "none" else int(sys.argv[1])
    print(f"capacity {size_primitive_cache(wanted)}", flush=True)
    import torch

    torch.set_num_threads(1)
    weight = torch.randn(4, 3, 3, 3)
    for height in range(FIRST_HEIGHT, FIRST_HEIGHT + SHAPES):
        torch.nn.functional.conv2d(torch.randn(1, 3, height, 8), weight)
    print(MARKER, flush=True)
    torch.nn.functional.conv2d(torch.randn(1, 3, FIRST_HEIGHT, 8), weight)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
