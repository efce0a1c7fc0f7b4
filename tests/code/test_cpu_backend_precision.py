"""bf16 weights with fp32 masters: updates below bf16's resolution are kept in the masters,
and stochastic rounding lets the bf16 weights follow them on average."""

from __future__ import annotations

import torch

from training.cpu_backend.precision import MasterWeightAdamW, build_optimizer, stochastic_bf16


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


def _stepped(fused: bool, dtype: str) -> tuple[list[torch.Tensor], torch.optim.Optimizer]:
    """A small model stepped three times with fixed gradients, the optimizer built as
    training builds it (`build_optimizer`), fused or with torch's loop."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 8))
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    model[1].bias.requires_grad_(False)  # a frozen parameter stays out of the optimizer
    optimizer = build_optimizer(model, dtype, lr=1e-3, weight_decay=0.01, fused=fused)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        for param in model.parameters():
            if param.requires_grad:
                param.grad = torch.randn(param.shape, generator=generator).to(param.dtype)
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().float().clone() for p in model.parameters()], optimizer


def test_training_builds_fused_optimizers() -> None:
    for dtype in ("float32", "bfloat16"):
        _, optimizer = _stepped(True, dtype)
        assert all(group["fused"] for group in optimizer.param_groups)
        model = torch.nn.Linear(4, 4)
        assert build_optimizer(model, dtype, lr=1e-3).param_groups[0]["fused"] is True


def test_the_fused_kernel_steps_as_the_loop_does() -> None:
    for dtype in ("float32", "bfloat16"):
        fused, _ = _stepped(True, dtype)
        loop, _ = _stepped(False, dtype)
        for a, b in zip(fused, loop, strict=True):
            # fp32: equal up to the order of float operations; bf16: the same masters round
            # to the same or a neighbouring bf16 value
            tolerance = 1e-6 if dtype == "float32" else 2e-2
            assert torch.allclose(a, b, atol=tolerance, rtol=0), (dtype, (a - b).abs().max())


def test_a_fused_optimizer_resumes_from_its_state_dict() -> None:
    _, optimizer = _stepped(True, "bfloat16")
    state = optimizer.state_dict()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 8)).to(torch.bfloat16)
    model[1].bias.requires_grad_(False)
    restored = build_optimizer(model, "bfloat16", lr=1e-3, weight_decay=0.01)
    restored.load_state_dict(state)
    assert isinstance(restored, MasterWeightAdamW) and isinstance(optimizer, MasterWeightAdamW)
    for a, b in zip(restored.masters, optimizer.masters, strict=True):
        assert torch.equal(a, b)
