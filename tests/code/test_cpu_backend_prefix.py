"""The shared-prefix shortcuts compute what the plain paths compute: the SFT loss and its
gradients, GRPO's completion log-probabilities, and greedy generation."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from serving.engine.engine import common_prefix_length, generate
from training.cpu_backend.prefix import causal_lm_loss, completion_logps, shared_prefix_length

VOCAB = 300


@pytest.fixture(scope="module")
def model() -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    return Qwen3ForCausalLM(config).eval()


def batch_with_shared_prefix(prefix: int = 40) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    shared = torch.randint(0, VOCAB, (prefix,))
    rows, lengths, width = [], [12, 20, 7], prefix + 20
    ids = torch.zeros((3, width), dtype=torch.long)
    mask = torch.zeros((3, width), dtype=torch.long)
    labels = torch.full((3, width), -100)
    for i, length in enumerate(lengths):
        tail = torch.randint(0, VOCAB, (length,))
        rows.append(torch.cat([shared, tail]))
        ids[i, : prefix + length] = rows[-1]
        mask[i, : prefix + length] = 1
        labels[i, prefix + 3 : prefix + length] = rows[-1][prefix + 3 :]  # "assistant" tokens
    return ids, mask, labels


def plain_loss(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> Any:
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, VOCAB), labels[:, 1:].reshape(-1), ignore_index=-100
    )


def test_shared_prefix_stops_before_the_first_labelled_token() -> None:
    ids, mask, labels = batch_with_shared_prefix(40)
    assert shared_prefix_length(ids, mask, labels) == 40
    labels[0, 30] = 5
    assert shared_prefix_length(ids, mask, labels) == 29


def test_sft_loss_and_gradients_match_a_plain_forward(model: Any) -> None:
    ids, mask, labels = batch_with_shared_prefix(40)
    model.zero_grad()
    reference = plain_loss(model, ids, mask, labels)
    reference.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    shared = causal_lm_loss(model, ids, mask, labels)
    shared.backward()
    assert shared.item() == pytest.approx(reference.item(), rel=1e-5)
    for name, parameter in model.named_parameters():
        assert torch.allclose(parameter.grad, expected[name], atol=1e-6), name


def test_completion_logps_match_each_row_alone(model: Any) -> None:
    """Left-padded prompts + right-padded completions, as TRL lays them out."""
    torch.manual_seed(2)
    shared = torch.randint(0, VOCAB, (50,)).tolist()
    prompts = [[*shared, 7, 8, 9], [*shared, 10], [*shared, 11, 12]]
    completions = [[1, 2, 3, 4], [5, 6], [7, 8, 9, 10]]
    width_p, width_c = max(map(len, prompts)), max(map(len, completions))
    ids = torch.zeros((3, width_p + width_c), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        ids[i, width_p - len(p) : width_p] = torch.tensor(p)
        mask[i, width_p - len(p) : width_p] = 1
        ids[i, width_p : width_p + len(c)] = torch.tensor(c)
        mask[i, width_p : width_p + len(c)] = 1
    logps, entropy = completion_logps(model, ids, mask, width_c, 0.7, compute_entropy=True)
    assert logps.shape == entropy.shape == (3, width_c)
    with torch.no_grad():
        for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            logits = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1 : -1] / 0.7
            expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c)[:, None])[:, 0]
            assert torch.allclose(logps[i, : len(c)], expected, atol=1e-5)


def test_generate_matches_transformers_greedy(model: Any) -> None:
    torch.manual_seed(3)
    shared = torch.randint(0, VOCAB, (30,)).tolist()
    prompts = [[*shared, 4, 5], [*shared, 6], [*shared, 4, 5]]
    assert common_prefix_length(prompts) == 30
    outputs = generate(model, prompts, 12, stop_ids={VOCAB + 1})
    for prompt, output in zip(prompts, outputs, strict=True):
        expected = model.generate(
            torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=0
        )[0, len(prompt) :].tolist()
        assert output == expected
    assert outputs[0] == outputs[2]  # one group, one decode


def test_generate_stops_at_a_stop_token_and_samples(model: Any) -> None:
    prompts = [[1, 2, 3, 4]] * 4
    greedy = generate(model, prompts[:1], 20, stop_ids=set())
    stop = greedy[0][2]
    stopped = generate(model, prompts[:1], 20, stop_ids={stop})[0]
    assert stopped[-1] == stop and len(stopped) <= 3
    torch.manual_seed(4)
    sampled = generate(model, prompts, 20, stop_ids=set(), temperature=5.0, top_p=0.95)
    assert len({tuple(s) for s in sampled}) > 1  # a GRPO group explores
