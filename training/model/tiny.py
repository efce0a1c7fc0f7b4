"""A tiny Qwen3 built locally: the production architecture, vocabulary and chat template at a
size that trains on two CPU cores. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from training.model.tokenizer import CallFormat, build_tokenizer


class TinyModelConfig(BaseModel):
    """Shape of the tiny model. Defaults: about 2M parameters (9 MB) with an 8k vocabulary."""

    model_config = ConfigDict(extra="forbid")

    call_format: CallFormat = Field(default="hermes", description="Chat template / call syntax.")
    vocab_limit: int = Field(default=8_192, ge=256, description="Qwen BPE ranks kept.")
    hidden_size: int = Field(default=128, ge=16, description="Model width.")
    num_layers: int = Field(default=4, ge=1, description="Decoder layers.")
    num_heads: int = Field(default=4, ge=1, description="Attention heads.")
    num_kv_heads: int = Field(default=2, ge=1, description="Key/value heads (GQA).")
    intermediate_size: int = Field(default=384, ge=16, description="MLP width.")
    max_positions: int = Field(default=4_096, ge=256, description="Context length.")
    seed: int = Field(default=0, description="Initialisation seed.")
    qk_norm_gain: float = Field(
        default=2.0,
        gt=0,
        le=8,
        description="Initial weight of Qwen3's query/key RMSNorms. With unit gains an "
        "attention logit is at most sqrt(head_dim) (5.7 at head_dim 32), too flat to pick the "
        "user's question out of a 2,400-token tool prompt; production models (head_dim 128) "
        "learn large gains, a tiny model trained for minutes never gets there from 1.",
    )


def build_tiny_model(out_dir: Path, config: TinyModelConfig | None = None) -> Path:
    """Write a randomly initialised tiny Qwen3 (weights, tokenizer, generation config)."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    config = config or TinyModelConfig()
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out_dir, config.call_format, config.vocab_limit)
    torch.manual_seed(config.seed)
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    model_config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        head_dim=config.hidden_size // config.num_heads,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    model = Qwen3ForCausalLM(model_config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_norm.weight.fill_(config.qk_norm_gain)
            layer.self_attn.k_norm.weight.fill_(config.qk_norm_gain)
    model.generation_config = GenerationConfig(
        eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, do_sample=False
    )
    model.save_pretrained(str(out_dir))
    return out_dir
