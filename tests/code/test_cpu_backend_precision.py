"""bf16 weights with fp32 masters: updates below bf16's resolution are kept in the masters,
and stochastic rounding lets the bf16 weights follow them on average."""

from __future__ import annotations

import torch

from training.cpu_backend.precision import MasterWeightAdamW, stochastic_bf16


def test_stochastic_rounding_is_unbiased_and_lands_on_neighbours() -> None:
    value = torch.full((200_000,), 1.0 + 2**-9)  # a quarter of the way to the next bf16
    rounded = stochastic_bf16(value, torch.Generator().manual_seed(0)).float()
    assert set(rounded.unique().tolist()) == {1.0, 1.0 + 2**-7}
    assert abs(float(rounded.mean()) - (1.0 + 2**-9)) < 2e-5
    negative = stochastic_bf16(-value, torch.Generator().manual_seed(1)).float()
    assert abs(float(negative.mean()) + (1.0 + 2**-9)) < 2e-5


def _train(stochastic: bool, steps: int = 10) -> tuple[float, float]:
    weight = torch.nn.Parameter(torch.full((50_000,), 0.05).to(torch.bfloat16))
    optimizer = MasterWeightAdamW(
        [weight], stochastic_rounding=stochastic, lr=1e-5, weight_decay=0.0
    )
    for _ in range(steps):
        weight.grad = torch.ones_like(weight)  # every step pushes each weight down by ~lr
        optimizer.step()
        optimizer.zero_grad()
    return float(weight.detach().float().mean()), float(optimizer.masters[0].mean())


def test_small_updates_survive_in_the_masters_and_reach_the_weights_on_average() -> None:
    start = float(torch.tensor(0.05).to(torch.bfloat16))
    nearest, master = _train(stochastic=False)
    assert abs(master - (start - 10e-5)) < 2e-6  # the masters moved by 10 x lr
    assert nearest == start  # under half a bf16 step: round-to-nearest never moves
    stochastic, master = _train(stochastic=True)
    assert abs(stochastic - master) < 1e-5  # the bf16 weights follow the masters


def test_masters_survive_a_state_dict_round_trip() -> None:
    weight = torch.nn.Parameter(torch.ones(10).to(torch.bfloat16))
    optimizer = MasterWeightAdamW([weight], lr=1e-3)
    weight.grad = torch.ones_like(weight)
    optimizer.step()
    state = optimizer.state_dict()
    fresh = torch.nn.Parameter(torch.ones(10).to(torch.bfloat16))
    restored = MasterWeightAdamW([fresh], lr=1e-3)
    restored.load_state_dict(state)
    assert torch.equal(restored.masters[0], optimizer.masters[0])


def test_a_step_without_gradients_leaves_the_bf16_weights_bit_identical() -> None:
    """A skipped (flat) GRPO batch gives no gradients; re-rounding the masters anyway would
    redraw every weight's stochastic rounding and move the model with no signal."""
    moved = torch.nn.Parameter(torch.full((50_000,), 0.05).to(torch.bfloat16))
    frozen = torch.nn.Parameter(torch.full((50_000,), 0.05).to(torch.bfloat16))
    optimizer = MasterWeightAdamW([moved, frozen], stochastic_rounding=True, lr=1e-5)
    moved.grad, frozen.grad = torch.ones_like(moved), torch.ones_like(frozen)
    optimizer.step()  # the masters now sit between two bf16 values
    optimizer.zero_grad()
    before = frozen.detach().clone()
    moved.grad = torch.ones_like(moved)  # only `moved` has a gradient this step
    optimizer.step()
    assert torch.equal(frozen.detach(), before)
    optimizer.zero_grad()
    snapshot = [moved.detach().clone(), frozen.detach().clone()]
    optimizer.step()  # no gradients at all
    assert all(torch.equal(p.detach(), s) for p, s in zip([moved, frozen], snapshot, strict=True))
