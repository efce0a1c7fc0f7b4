"""bf16 weights for speed, fp32 master weights for the optimizer.

On these CPUs a bf16 matmul runs 4-8x faster than fp32 (AVX512-BF16: 950 vs 220 GFLOPS on
2 cores; with AMX about 2,800 vs 350), so the model computes in bf16. But AdamW's update at
a fine-tuning learning rate (5e-5 x an Adam step of ~1) is far below bf16's resolution for a
weight of typical size (8 bits of mantissa: a relative step of 1/256), so most updates would
round away: measured, the SFT loss moved 0.98 -> 0.88 in three steps with pure bf16 weights
and 0.98 -> 0.65 with fp32 masters. Autocast instead re-casts every weight at every forward
call, which cost more than it saved (2.8 s of an 11 s step).

So the optimizer owns fp32 copies: gradients (computed in bf16) are copied up, AdamW steps
the masters, and the bf16 weights are refreshed from them. The masters are part of the
optimizer's state dict, so a resumed run continues from the exact fp32 values.

Refreshing by rounding to nearest hides every accumulated change smaller than half a bf16
step: GRPO at lr 1e-5 moves a weight by ~1e-5 per step, and a typical weight's bf16 step is
~2e-4, so eight GRPO steps would leave most bf16 weights where they were (measured: four
AdamW steps at lr 1e-5 lowered a batch's loss 2.84 -> 2.30 in fp32 and not at all with
nearest rounding). `stochastic_rounding` rounds up or down with probability proportional to
the distance instead: unbiased, so the model the rollouts sample from follows the masters
on average (`tests/code/test_cpu_backend_precision.py`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


def stochastic_bf16(source: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """`source` (fp32) rounded to bf16 up or down at random, in proportion to the distance
    to each neighbour: add uniform noise below bf16's last mantissa bit, then truncate."""
    bits = source.contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, bits.shape, dtype=torch.int32, generator=generator)
    truncated = (bits + noise) & -65_536  # keep sign, exponent and bf16's 7 mantissa bits
    return truncated.view(torch.float32).to(torch.bfloat16)


class MasterWeightAdamW(torch.optim.AdamW):
    """AdamW over fp32 master copies of (bf16) model parameters."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        stochastic_rounding: bool = False,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        self.model_params = [p for p in params if p.requires_grad]
        masters = [p.detach().float().clone() for p in self.model_params]
        super().__init__(masters, **kwargs)
        self.stochastic_rounding = stochastic_rounding
        self._generator = torch.Generator().manual_seed(seed)

    @property
    def masters(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        stepped = []
        for param, master in zip(self.model_params, self.masters, strict=True):
            stepped.append(param.grad is not None)
            master.grad = None if param.grad is None else param.grad.float()
            param.grad = None  # one copy of each gradient at a time: ~0.3 GB less at peak
        loss = super().step(closure)
        for param, master, moved in zip(self.model_params, self.masters, stepped, strict=True):
            if not moved:
                # AdamW skipped it, so its master is unchanged; re-rounding it would still
                # draw a new bf16 value, noise that no gradient asked for
                continue
            if self.stochastic_rounding and param.dtype == torch.bfloat16:
                param.copy_(stochastic_bf16(master, self._generator))
            else:
                param.copy_(master)
            master.grad = None
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.model_params:
            if set_to_none:
                param.grad = None
            elif param.grad is not None:
                param.grad.zero_()
        super().zero_grad(set_to_none)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["masters"] = [m.detach() for m in self.masters]  # saved as is, never copied
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        saved = state.pop("masters", None)
        super().load_state_dict(state)
        if saved is None:
            return
        with torch.no_grad():
            for param, master, value in zip(self.model_params, self.masters, saved, strict=True):
                master.copy_(value)
                param.copy_(value)


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a resolved `cpu.dtype` (`auto` is resolved per run first, by
    `compute_dtype.pinned_choice`)."""
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    if name not in dtypes:
        raise ValueError(f"compute dtype {name!r} is not resolved: expected float32 or bfloat16")
    return dtypes[name]


def build_optimizer(
    model: Any, dtype: str, stochastic_rounding: bool = False, **kwargs: Any
) -> torch.optim.Optimizer:
    """AdamW for a float32 model, `MasterWeightAdamW` for a bf16 one; torch's fused CPU
    kernel either way (one pass over each tensor instead of one per arithmetic step).

    Why fused: measured on SmolLM2-135M (2 cores, AMX host, `bench_optimizer_step.py` ->
    `optimizer_step.json`), a step over the bf16 model's fp32 masters took 0.47 s with the
    loop and 0.19 s fused (SFT's nearest rounding), 0.96 and 0.75 s with GRPO's stochastic
    rounding, and 0.27 and 0.08 s over a float32 model (the AVX2 hosts' path)."""
    params = [p for p in model.parameters() if p.requires_grad]
    kwargs.setdefault("fused", True)
    if dtype == "bfloat16":
        return MasterWeightAdamW(params, stochastic_rounding=stochastic_rounding, **kwargs)
    return torch.optim.AdamW(params, **kwargs)


class PrecisionMixin:
    """For a transformers `Trainer` subclass: build the optimizer for the model's dtype
    (`toolrl_dtype` set by the caller) instead of the Trainer's own AdamW."""

    toolrl_dtype: str = "float32"
    toolrl_stochastic_rounding: bool = False
    optimizer: Any
    model: Any
    args: Any

    def create_optimizer(self, *args: Any, **kwargs: Any) -> Any:
        if self.optimizer is None:
            self.optimizer = build_optimizer(
                self.model,
                self.toolrl_dtype,
                stochastic_rounding=self.toolrl_stochastic_rounding,
                lr=self.args.learning_rate,
                betas=(self.args.adam_beta1, self.args.adam_beta2),
                eps=self.args.adam_epsilon,
                weight_decay=self.args.weight_decay,
            )
        return self.optimizer
