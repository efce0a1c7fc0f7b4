"""Load a split with verl's own `RLHFDataset`, exactly as the trainer's dataloader will.

This catches schema drift that our own checks could share a blind spot with (verl reads
`prompt`, `extra_info.tools_kwargs`, `need_tools_kwargs` ... its own way). Requires the
training extra; the caller reports a skip when verl is not installed.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

#: verl tokenizes every loaded row to filter long prompts; a sample keeps this check fast on
#: 100k-row datasets while still reading the whole parquet file through `datasets`.
SAMPLE_ROWS = 512


@cache
def _tokenizer() -> Any:
    from training.model.tokenizer import build_tokenizer

    # the tokenizer lives in memory once built: its files need not outlive this call
    with tempfile.TemporaryDirectory(prefix="toolrl-tok-") as out_dir:
        return build_tokenizer(Path(out_dir), "hermes", 8_192)


def load_with_verl(parquet: Path, max_prompt_length: int = 4_096) -> int:
    """Return the number of rows verl kept; raise whatever verl raises on bad data."""
    import datasets
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    datasets.disable_progress_bars()
    # verl caches the parquet here; the cache is of no use once the rows are read
    with tempfile.TemporaryDirectory(prefix="toolrl-verl-") as cache_dir:
        config = OmegaConf.create(
            {
                "prompt_key": "prompt",
                "max_prompt_length": max_prompt_length,
                "filter_overlong_prompts": True,
                "filter_overlong_prompts_workers": 1,
                "return_raw_chat": True,
                "truncation": "error",
                "cache_dir": cache_dir,
            }
        )
        with contextlib.redirect_stdout(io.StringIO()):  # verl prints its progress to stdout
            dataset = RLHFDataset(str(parquet), _tokenizer(), config, max_samples=SAMPLE_ROWS)
            item = dataset[0] if len(dataset) else {}
    if len(dataset) == 0:
        raise ValueError("verl kept no rows (all filtered as over-long?)")
    if not item.get("tools_kwargs"):
        raise ValueError("verl sees no tools_kwargs on the first row")
    if item.get("agent_name") != "tool_agent":
        raise ValueError(f"verl sees agent_name={item.get('agent_name')!r}, not 'tool_agent'")
    return len(dataset)
