"""The packed engine computes what separate forwards compute: greedy continuations equal
`transformers.generate`, rows that join late or share only part of the prefix see exactly
their own tokens, and the frozen-context loss and log-probabilities equal a plain forward
(values) and a step-by-step reference (gradients)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import DynamicCache

from serving.engine.engine import Engine, Request, Sampling, generate
from serving.engine.packed import PackedKV
from training.cpu_backend.packed_loss import (
    frozen_context_completion_logps,
    frozen_context_sft_loss,
)
from training.cpu_backend.prefix import completion_logps

VOCAB = 300


def tiny(kind: str, tie: bool = True) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    shape = dict(
        vocab_size=VOCAB,
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        tie_word_embeddings=tie,
    )
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**shape)).eval()
    return Qwen3ForCausalLM(Qwen3Config(**shape)).eval()


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def model(request: pytest.FixtureRequest) -> Any:
    return tiny(request.param)


def prompts(prefix: int = 70, count: int = 7, seed: int = 1) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    shared = torch.randint(3, VOCAB, (prefix,), generator=generator).tolist()
    return [
        shared + torch.randint(3, VOCAB, (5 + 9 * i,), generator=generator).tolist()
        for i in range(count)
    ]


def hf_greedy(model: Any, prompt: list[int], new: int) -> list[int]:
    out = model.generate(
        torch.tensor([prompt]),
        max_new_tokens=new,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    return list(out[0, len(prompt) :].tolist())


def test_greedy_generation_equals_transformers(model: Any) -> None:
    batch = prompts()
    # fewer slots than prompts: rows join as others finish (continuous batching)
    ours = generate(model, batch, 12, stop_ids=set(), max_rows=3)
    model.set_attn_implementation("sdpa")
    assert ours == [hf_greedy(model, p, 12) for p in batch]


def test_long_prompts_split_into_chunks_equal_one_pass(model: Any) -> None:
    batch = prompts(prefix=40, count=4)
    small = Engine(model, max_rows=4, max_query_tokens=16)
    small.set_prefix(batch[0][:40])
    requests = [small.submit(Request(p, Sampling(8))) for p in batch]
    small.run_until_done()
    assert [r.tokens for r in requests] == generate(model, batch, 8, set())


def test_a_row_sharing_part_of_the_prefix_sees_only_that_part(model: Any) -> None:
    batch = prompts(prefix=50, count=2)
    other = batch[0][:30] + torch.randint(3, VOCAB, (25,)).tolist()
    engine = Engine(model, max_rows=4)
    engine.set_prefix(batch[0][:50])
    requests = [engine.submit(Request(p, Sampling(10))) for p in [*batch, other]]
    engine.run_until_done()
    model.set_attn_implementation("sdpa")
    assert requests[2].tokens == hf_greedy(model, other, 10)
    assert requests[0].tokens == hf_greedy(model, batch[0], 10)


def test_extending_a_row_twice_equals_one_prompt(model: Any) -> None:
    batch = prompts(prefix=30, count=1)
    kv = PackedKV(model)
    kv.set_prefix(batch[0][:30])
    kv.start_row(0)
    tail = batch[0][30:]
    kv.extend([0], [tail[:3]])
    last = kv.extend([0], [tail[3:]])[0]
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        reference = model.get_decoder()(input_ids=torch.tensor([batch[0]])).last_hidden_state[0, -1]
    assert torch.allclose(last[0], reference, atol=1e-5)


def test_stop_tokens_and_length_finish_requests(model: Any) -> None:
    batch = prompts(count=2)
    first = generate(model, batch[:1], 6, set())[0]
    engine = Engine(model)
    engine.set_prefix(batch[0][:70])
    stop = engine.submit(Request(batch[0], Sampling(6, stop_ids=frozenset({first[2]}))))
    cut = engine.submit(Request(batch[1], Sampling(4)))
    engine.run_until_done()
    ends = first.index(first[2])  # the first time the stop token comes up
    assert stop.tokens == first[: ends + 1] and stop.finish == "stop"
    assert len(cut.tokens) == 4 and cut.finish == "length"


def test_a_prompt_past_the_context_is_refused_not_crashed(model: Any) -> None:
    engine = Engine(model)
    request = engine.submit(Request(list(range(3, 600)), Sampling(8)))
    engine.run_until_done()
    assert request.finish == "error" and "context" in (request.error or "")


def test_seeded_sampling_repeats(model: Any) -> None:
    batch = prompts(count=3)
    first = generate(model, batch, 10, set(), temperature=1.0, seed=7)
    assert first == generate(model, batch, 10, set(), temperature=1.0, seed=7)
    assert first != generate(model, batch, 10, set(), temperature=1.0, seed=8)


def sft_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = prompts(prefix=40, count=3, seed=3)
    width = max(len(r) for r in rows)
    ids = torch.zeros((3, width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
        # two "assistant" runs with "context" (a tool response) between them
        for lo, hi in ((44, min(48, len(row))), (52, len(row))):
            labels[i, lo:hi] = ids[i, lo:hi]
    return ids, mask, labels


def reference_frozen_context_loss(
    model: Any,
    ids: torch.Tensor,
    mask: torch.Tensor,
    labels: torch.Tensor,
    open_positions: list[set[int]] | None = None,
) -> torch.Tensor:
    """Segment by segment: positions that predict a labelled token run with gradient (and
    the `open_positions` of each row, with gradient but no loss), all others without, on
    one growing cache per row (what the packed two-pass version must equal)."""
    total = torch.zeros(())
    count = 0
    for row in range(ids.shape[0]):
        length = int(mask[row].sum())
        trained = [t for t in range(length - 1) if labels[row, t + 1] != -100]
        graded = set(trained) | (open_positions[row] if open_positions else set())
        cache = DynamicCache()
        position = 0
        while position < length - 1:
            grad = position in graded
            end = position
            while end < length - 1 and (end in graded) == grad:
                end += 1
            chunk = ids[row : row + 1, position:end]
            with torch.set_grad_enabled(grad):
                before = [(layer.keys, layer.values) for layer in cache.layers]
                hidden = model.get_decoder()(
                    input_ids=chunk, past_key_values=cache, use_cache=True
                ).last_hidden_state[0]
            if not grad:  # keep earlier trained keys attached to the graph
                for layer, old in zip(cache.layers, before, strict=False):
                    size = old[0].shape[-2]
                    layer.keys = torch.cat([old[0], layer.keys[..., size:, :]], dim=-2)
                    layer.values = torch.cat([old[1], layer.values[..., size:, :]], dim=-2)
            scored = [t - position for t in range(position, end) if t in trained]
            if grad and scored:
                logits = model.get_output_embeddings()(hidden[scored]).float()
                targets = ids[row, [position + 1 + t for t in scored]]
                total = total + torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
                count += len(scored)
            position = end
    return total / count


def assert_gradients_equal(model: Any, expected: dict[str, torch.Tensor]) -> None:
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
        assert torch.allclose(parameter.grad, expected[name], atol=2e-6), name


def test_frozen_context_loss_equals_plain_forward_and_reference_gradients(model: Any) -> None:
    model.set_attn_implementation("sdpa")
    ids, mask, labels = sft_batch()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        plain = torch.nn.functional.cross_entropy(
            logits.reshape(-1, VOCAB), labels[:, 1:].reshape(-1), ignore_index=-100
        )
    model.zero_grad()
    reference = reference_frozen_context_loss(model, ids, mask, labels)
    reference.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    packed = frozen_context_sft_loss(model, ids, mask, labels)
    packed.backward()
    assert packed.item() == pytest.approx(plain.item(), rel=1e-5)
    assert reference.item() == pytest.approx(plain.item(), rel=1e-5)
    assert_gradients_equal(model, expected)


def test_frozen_context_logps_equal_the_exact_path(model: Any) -> None:
    torch.manual_seed(4)
    batch = prompts(prefix=30, count=4, seed=5)
    completion = 9
    width = max(len(p) for p in batch)
    ids = torch.zeros((4, width + completion), dtype=torch.long)
    attention = torch.zeros_like(ids)
    lengths = [9, 6, 8, 3]
    for row, prompt in enumerate(batch):
        ids[row, width - len(prompt) : width] = torch.tensor(prompt)
        attention[row, width - len(prompt) : width] = 1
        ids[row, width : width + lengths[row]] = torch.randint(3, VOCAB, (lengths[row],))
        attention[row, width : width + lengths[row]] = 1
    model_tokens = torch.ones((4, completion), dtype=torch.long)
    model_tokens[0, 2:5] = 0  # a tool response inside the first completion
    with torch.no_grad():
        exact, _ = completion_logps(model, ids, attention, completion)
        frozen, _ = frozen_context_completion_logps(model, ids, attention, completion)
    valid = attention[:, width:].bool()
    assert torch.allclose(exact[valid], frozen[valid], atol=1e-5)
    with_grad, entropy = frozen_context_completion_logps(
        model, ids, attention, completion, compute_entropy=True, trained_mask=model_tokens
    )
    trained = valid & model_tokens.bool()
    assert with_grad.requires_grad and entropy is not None
    assert torch.allclose(exact[trained], with_grad.detach()[trained], atol=1e-5)
    assert bool((with_grad.detach()[~trained] == 0).all())


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_question_gradient_trains_the_question_and_keeps_the_loss(kind: str) -> None:
    """`sft_question_gradient`: same loss value; the gradient equals the segment-by-segment
    reference in which the question also runs with gradient; and a token that appears only
    in the question gets an input-embedding gradient (untied head, so the softmax does not
    give every row one), which the fully frozen context never gives."""
    from training.cpu_backend.packed_loss import question_positions, sft_positions

    model = tiny(kind, tie=False)
    model.set_attn_implementation("sdpa")
    ids, mask, labels = sft_batch()
    only_in_question = VOCAB - 1
    ids[:, 41] = only_in_question  # inside every row's question (after the 40 shared tokens)
    assert int((ids == only_in_question).sum()) == 3
    frozen_positions = sft_positions(ids, mask, labels)
    opened = question_positions(frozen_positions.sequences, frozen_positions.positions)
    assert [p.tolist() for p in opened] == [[40, 41, 42]] * 3  # shared prefix .. first trained
    embeddings = model.get_input_embeddings().weight

    model.zero_grad()
    frozen = frozen_context_sft_loss(model, ids, mask, labels)
    frozen.backward()
    assert embeddings.grad is not None
    assert float(embeddings.grad[only_in_question].abs().sum()) == 0.0

    model.zero_grad()
    reference = reference_frozen_context_loss(
        model, ids, mask, labels, [set(p.tolist()) for p in opened]
    )
    reference.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    packed = frozen_context_sft_loss(model, ids, mask, labels, question_gradient=True)
    packed.backward()
    assert packed.item() == pytest.approx(frozen.item(), rel=1e-5)
    assert reference.item() == pytest.approx(frozen.item(), rel=1e-5)
    assert_gradients_equal(model, expected)
    assert float(embeddings.grad[only_in_question].abs().sum()) > 0.0


def test_a_batch_that_shares_its_question_has_nothing_to_open() -> None:
    from training.cpu_backend.packed_loss import question_positions

    same = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 9, 11]]
    trained = [torch.tensor([4]), torch.tensor([4])]
    assert [p.tolist() for p in question_positions(same, trained)] == [[], []]
    assert question_positions([], []) == []


def test_call_boundary_weight_scales_only_the_choice_after_a_closing_tag(model: Any) -> None:
    """`cpu.sft_call_boundary_weight`: the loss is the plain per-token cross-entropy with the
    token after each trained closing tag counted `weight` times, over the same token count;
    a closing tag in the context (not trained) weighs nothing; weight 1 is the plain loss."""
    from training.cpu_backend.packed_loss import CallBoundary

    model.set_attn_implementation("sdpa")
    ids, mask, labels = sft_batch()
    close = VOCAB - 2
    ids[1:, 45] = close  # inside the first assistant run (rows 1, 2; row 0 ends at 45)
    labels[1:, 45] = close
    ids[:, 50] = close  # in the context between the runs: not trained, so never weighted
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        per_token = torch.nn.functional.cross_entropy(
            logits.reshape(-1, VOCAB),
            labels[:, 1:].reshape(-1),
            ignore_index=-100,
            reduction="none",
        ).reshape(labels[:, 1:].shape)
    trained = labels[:, 1:] != -100
    weights = torch.where((ids[:, :-1] == close) & trained, 4.0, 1.0)
    expected = float((per_token * weights)[trained].sum() / trained.sum())
    plain = float(per_token[trained].sum() / trained.sum())
    assert (
        int(((ids[:, :-1] == close) & trained).sum()) == 2
    )  # one weighted choice in each of rows 1, 2
    weighted = frozen_context_sft_loss(model, ids, mask, labels, boundary=CallBoundary(close, 4.0))
    assert weighted.item() == pytest.approx(expected, rel=1e-5)
    assert weighted.item() != pytest.approx(plain, rel=1e-3)
    unweighted = frozen_context_sft_loss(
        model, ids, mask, labels, boundary=CallBoundary(close, 1.0)
    )
    assert unweighted.item() == pytest.approx(plain, rel=1e-5)
