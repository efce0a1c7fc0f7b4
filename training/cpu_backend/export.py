"""The trained model as the loop ships it: a plain Hugging Face directory, no optimizer.

With bf16 weights the optimizer's fp32 masters are the trained model (`precision.py`); the
bf16 weights a checkpoint holds are the working copy the rollouts sampled from, rounded
*stochastically* so that small updates reach them on average. As an artifact that copy is
one random draw: measured on the time pack after 8 GRPO steps at lr 1e-5, it sat 7.9e-4
(relative norm) from the masters while the masters had moved only 1.8e-4 from the SFT
model, so most of what separated the candidate from its start was rounding noise. The
export therefore rounds the masters to the *nearest* bf16 value: the closest bf16 model
to what was trained, the same on every export of the same checkpoint.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)
OPTIMIZER_FILE = "optimizer.pt"


def saved_masters(checkpoint: Path) -> list[torch.Tensor] | None:
    """The fp32 masters a `MasterWeightAdamW` checkpoint holds, or None (fp32 training, or
    a directory without optimizer state)."""
    path = checkpoint / OPTIMIZER_FILE
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    masters = state.get("masters") if isinstance(state, dict) else None
    return list(masters) if masters else None


def _weights_from_masters(source: Path, masters: list[torch.Tensor], target: Path) -> None:
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.bfloat16)
    params = [p for p in model.parameters() if p.requires_grad]  # the optimizer's order
    if len(params) != len(masters) or any(
        p.shape != m.shape for p, m in zip(params, masters, strict=True)
    ):
        raise ValueError(
            f"{source}: the optimizer's {len(masters)} master tensors do not match the "
            f"model's {len(params)} parameters; the checkpoint is not from this model"
        )
    with torch.no_grad():
        for param, master in zip(params, masters, strict=True):
            param.copy_(master.to(param.dtype))  # round to nearest
    model.save_pretrained(str(target), safe_serialization=True)


def export_model(source: Path, target: Path) -> Path:
    """`source` (a checkpoint's actor directory) as a model directory at `target`, written
    beside it and renamed into place, so a crash never leaves half a model there."""
    scratch = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    for name in MODEL_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, scratch / name)
    masters = saved_masters(source)
    if masters is not None:
        try:
            _weights_from_masters(source, masters, scratch)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    shutil.rmtree(target, ignore_errors=True)
    scratch.rename(target)
    return target
