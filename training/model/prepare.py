"""`toolrl model prepare`: turn a package-shipped GGUF model into the one Hugging Face directory
that every consumer reads (the CPU backend, `transformers serve`, vLLM, verl, the registry).

What the conversion adds to the de-quantised weights, and why:
- **Tool-call tokens.** `<tool_call>`, `</tool_call>`, `<tool_response>` and `</tool_response>`
  become single added tokens (not special, so decoding keeps them, as in Qwen's tokenizer).
  vLLM's `hermes` tool parser refuses a tokenizer without them, and one token is easier to
  learn than five pieces. Their embeddings start as the mean of the pieces they replace.
- **The chat template** `chatml_hermes.jinja`: renders `tools`, assistant `tool_calls` and
  `tool` messages, with `{% generation %}` markers for assistant-only loss.
- **eos and pad on purpose.** After GGUF conversion the tokenizer's eos is `<|im_start|>` and
  it has no pad token; generation would never stop. eos becomes `<|im_end|>`, pad
  `<|endoftext|>`, in the tokenizer, the model config and the generation config.
- **Response parsing** for TRL's tool loop: a response schema in the tokenizer config. The
  tool tags stay ordinary (not special) tokens, so every decode keeps them, verl's (special
  tokens skipped) included, and the agent loop parses calls from the text where a server
  (`transformers serve` on a Llama) returns none.
- **bf16 weights**: SmolLM2's own release dtype; half the size of fp32 on disk and in the
  registry. Training keeps fp32 master weights in its optimizer.

The directory lands in a content-addressed cache (`TOOLRL_MODEL_CACHE`, default
`~/.cache/toolrl/models`): the key hashes the GGUF bytes and everything this module adds, so
the same input gives the same directory, and a changed template gives a new one. It is
written to a scratch folder and renamed into place, so a killed conversion leaves nothing
half-written, and it records its source, checksum and licence in `toolrl_model.json`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from importlib import resources
from pathlib import Path
from typing import Any

from training.model.source import GgufSource, ModelSourceError, check, locate

logger = logging.getLogger(__name__)

PREPARE_VERSION = 1
"""Bump when the conversion changes what it writes (a new cache key for every model)."""
TEMPLATE_FILE = "chatml_hermes.jinja"
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
MANIFEST = "toolrl_model.json"
CACHE_ENV = "TOOLRL_MODEL_CACHE"
#: What `tokenizer.parse_response` needs to read hermes calls (transformers' legacy response
#: schema, the one TRL sets for Qwen3's template; `transformers serve` reads its tool_calls).
RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "role": {"const": "assistant"},
        "content": {"type": "string", "x-regex": r"^(.*?)(?:\n?\n?<tool_call>|$)"},
        "tool_calls": {
            "x-regex-iterator": r"<tool_call>\s*(.+?)\s*</tool_call>",
            "type": "array",
            "items": {
                "x-parser": "json",
                "x-parser-args": {"transform": "{type: 'function', function: @}"},
                "type": "object",
                "properties": {
                    "type": {"const": "function"},
                    "function": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "arguments": {"type": "object", "additionalProperties": {}},
                        },
                    },
                },
            },
        },
    },
}


def chat_template() -> str:
    """The project's ChatML + hermes tool-calling template (package data)."""
    return (
        resources.files("training.model")
        .joinpath("chat_templates", TEMPLATE_FILE)
        .read_text(encoding="utf-8")
    )


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "toolrl" / "models"


def cache_key(source: GgufSource) -> str:
    """Same GGUF bytes + same conversion -> same key (and directory)."""
    material = json.dumps(
        {
            "gguf_sha256": source.sha256,
            "prepare_version": PREPARE_VERSION,
            "template_sha256": hashlib.sha256(chat_template().encode()).hexdigest(),
            "tool_tokens": TOOL_TOKENS,
            "eos": EOS_TOKEN,
            "pad": PAD_TOKEN,
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:20]


def prepared_dir(reference: str, root: Path | None = None) -> Path:
    """The cached directory for `reference`, converting it first if it is not there yet."""
    source = locate(reference)
    root = root or cache_root()
    target = root / f"{source.model_name.lower()}-{cache_key(source)}"
    if (target / MANIFEST).is_file():
        return target
    source = check(source)
    root.mkdir(parents=True, exist_ok=True)
    scratch = root / f".{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        convert(source, scratch)
        if (target / MANIFEST).is_file():  # another process won the race: keep its copy
            shutil.rmtree(scratch, ignore_errors=True)
            return target
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _new_token_rows(tokenizer: Any, embeddings: Any, first_new: int) -> None:
    """Each added token's embedding starts as the mean of the pieces it used to be."""
    import torch

    with torch.no_grad():
        for offset, token in enumerate(TOOL_TOKENS):
            pieces = tokenizer(token, add_special_tokens=False, split_special_tokens=True)
            ids = [i for i in pieces["input_ids"] if i < first_new] or [0]
            embeddings.weight[first_new + offset] = embeddings.weight[ids].mean(dim=0)


def convert(source: GgufSource, out_dir: Path) -> Path:
    """De-quantise `source` and write the prepared directory to `out_dir`."""
    import torch
    from tokenizers import AddedToken
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    started = time.perf_counter()
    folder, name = str(source.path.parent), source.path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except (ValueError, KeyError, RuntimeError, OSError) as exc:
        raise ModelSourceError(
            f"transformers could not load {source.path.name} ({type(exc).__name__}: "
            f"{str(exc)[:160]}); check that `gguf` is installed (training extra)"
        ) from None
    base_vocab = len(tokenizer)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    _new_token_rows(tokenizer, model.get_input_embeddings(), base_vocab)
    tokenizer.eos_token = EOS_TOKEN
    tokenizer.pad_token = PAD_TOKEN
    tokenizer.chat_template = chat_template()
    tokenizer.response_schema = RESPONSE_SCHEMA
    tokenizer.clean_up_tokenization_spaces = False  # destructive for BPE (spaces before ".")
    eos_id = _token_id(tokenizer, EOS_TOKEN)
    pad_id = _token_id(tokenizer, PAD_TOKEN)
    model.config.eos_token_id = eos_id
    model.config.pad_token_id = pad_id
    model.generation_config = GenerationConfig(
        eos_token_id=[eos_id], pad_token_id=pad_id, do_sample=False, max_new_tokens=512
    )
    model = model.to(dtype=torch.bfloat16)  # type: ignore[call-arg]
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    manifest = {
        "schema_version": 1,
        "source": source.reference,
        "distribution": f"{source.distribution}=={source.version}",
        "file": source.path.name,
        "gguf_sha256": source.sha256,
        "licence": source.licence,
        "model_name": source.model_name,
        "architecture": source.architecture,
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "vocab_size": len(tokenizer),
        "added_tokens": list(TOOL_TOKENS),
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "chat_template": TEMPLATE_FILE,
        "dtype": "bfloat16",
        "prepare_version": PREPARE_VERSION,
        "cache_key": cache_key(source),
        "seconds": round(time.perf_counter() - started, 1),
    }
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out_dir


def _token_id(tokenizer: Any, token: str) -> int:
    found = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(found, int) or tokenizer.convert_ids_to_tokens(found) != token:
        raise ModelSourceError(f"the converted tokenizer has no {token!r} token")
    return found


def read_manifest(model_dir: Path) -> dict[str, Any] | None:
    """The provenance of a prepared directory, or None for any other model directory."""
    try:
        payload = json.loads((model_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None
