"""The exported model is the bf16 model nearest to the optimizer's fp32 masters, not the
checkpoint's stochastically rounded working copy (one random draw around them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from training.cpu_backend.export import export_model, saved_masters
from training.cpu_backend.precision import MasterWeightAdamW
from training.model.tiny import TinyModelConfig, build_tiny_model


@pytest.fixture(scope="module")
def trained_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bf16 tiny model after three small stochastic-rounding steps, saved as the GRPO
    trainer saves it: working weights in model.safetensors, masters in optimizer.pt."""
    root = tmp_path_factory.mktemp("export")
    source = build_tiny_model(root / "tiny", TinyModelConfig(hidden_size=64, num_layers=2))
    model = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.bfloat16)
    optimizer = MasterWeightAdamW(
        model.parameters(), stochastic_rounding=True, seed=3, lr=2e-3, weight_decay=0.0
    )
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        for param in model.parameters():
            param.grad = torch.randn(param.shape, generator=generator).to(param.dtype)
        optimizer.step()
        optimizer.zero_grad()
    actor = root / "global_step_3" / "actor"
    model.save_pretrained(str(actor))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (source / name).is_file():
            (actor / name).write_bytes((source / name).read_bytes())
    torch.save(optimizer.state_dict(), actor / "optimizer.pt")
    return actor


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(model_dir / "model.safetensors"))


def test_the_export_holds_the_masters_rounded_to_nearest(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    masters = saved_masters(trained_checkpoint)
    assert masters is not None
    out = export_model(trained_checkpoint, tmp_path / "model")
    model = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.bfloat16)
    params = [p for p in model.parameters() if p.requires_grad]
    assert all(
        torch.equal(p.detach(), m.to(torch.bfloat16)) for p, m in zip(params, masters, strict=True)
    )
    working, exported = _weights(trained_checkpoint), _weights(out)
    differing = sum(int((working[k] != exported[k]).sum()) for k in exported)
    assert differing > 0, "the export must not be the stochastic working copy"
    assert not (out / "optimizer.pt").exists()
    assert (out / "tokenizer.json").is_file()


def test_the_export_is_the_same_every_time(trained_checkpoint: Path, tmp_path: Path) -> None:
    first = _weights(export_model(trained_checkpoint, tmp_path / "a"))
    second = _weights(export_model(trained_checkpoint, tmp_path / "b"))
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_a_checkpoint_without_masters_is_copied_as_is(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for path in trained_checkpoint.iterdir():
        if path.name != "optimizer.pt":
            (plain / path.name).write_bytes(path.read_bytes())
    out = export_model(plain, tmp_path / "model")
    assert (out / "model.safetensors").read_bytes() == (
        trained_checkpoint / "model.safetensors"
    ).read_bytes()


def test_masters_from_another_model_are_refused_and_nothing_is_half_written(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    for path in trained_checkpoint.iterdir():
        (foreign / path.name).write_bytes(path.read_bytes())
    state = torch.load(foreign / "optimizer.pt", weights_only=True)
    state["masters"] = state["masters"][:-1]
    torch.save(state, foreign / "optimizer.pt")
    with pytest.raises(ValueError, match="not from this model"):
        export_model(foreign, tmp_path / "model")
    assert not (tmp_path / "model").exists() and not (tmp_path / ".model.tmp").exists()
