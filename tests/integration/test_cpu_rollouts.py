"""GRPO rollouts through the one agent loop (`training/cpu_backend/rollouts.py`), against a
real mock-mode MCP server on loopback: the tokens GRPO trains on, the mask that keeps tool
results out of the loss, one tool session per rollout, the completion budget, and a clear
stop when the tool server is down.

The model turns are scripted (`ScriptedEngine`, standing in for the engine thread: a random
tiny model cannot be made to call a tool on cue); everything else is real: the project's
prompt renderer and parser, the agent loop, the MCP server and its tools. A last test runs
the real engine on the real tiny model.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from serving.engine.engine import Request
from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import RunningServer, start
from serving.renderer import ChatRenderer
from serving.tools import get_catalog
from serving.tools.base import ToolContext
from training.cpu_backend.episodes import EpisodeSettings, cpu_renderer
from training.cpu_backend.rollouts import EpisodeRollouts, Resampling, RolloutError, flat_groups
from training.model.prepare import chat_template
from training.model.tokenizer import build_tokenizer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class ScriptedEngine:
    """Answers each model turn with the next scripted text of the episode's question
    (read from the prompt), as the tokens the engine would have sampled."""

    def __init__(self, renderer: ChatRenderer, script: dict[str, list[str]]) -> None:
        self.renderer, self.script = renderer, {q: list(t) for q, t in script.items()}
        self.end = renderer.tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def generate_async(self, request: Request, *args: Any, **kwargs: Any) -> Request:
        prompt = self.renderer.tokenizer.decode(request.prompt)
        question = next(q for q in self.script if q in prompt)
        tokens = [*self.renderer.encode(self.script[question].pop(0)), self.end]
        limit = request.sampling.max_new_tokens
        request.tokens = tokens[:limit]
        request.finish = "stop" if len(tokens) <= limit else "length"
        return request

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with start(ServerConfig(mode="mock", port=0, workers=1, log_level="warning")) as running:
        yield running


@pytest.fixture(scope="module")
def renderer(tmp_path_factory: pytest.TempPathFactory) -> ChatRenderer:
    tokenizer = build_tokenizer(tmp_path_factory.mktemp("tok"), "hermes", 8_192)
    tokenizer.chat_template = chat_template()
    return ChatRenderer(tokenizer)


def rollouts(renderer: ChatRenderer, url: str, budget: int = 512) -> EpisodeRollouts:
    settings = EpisodeSettings(max_turns=4, max_tokens=budget, completion_budget=budget)
    return EpisodeRollouts(renderer, url, settings, threads=1)


def trainer(engine: ScriptedEngine, rows: list[dict[str, Any]]) -> Any:
    """What `rollout_func` reads from TRL's trainer: the model and the batch's rows."""
    return SimpleNamespace(
        model=engine,
        toolrl_batch_rows=rows,
        accelerator=SimpleNamespace(unwrap_model=lambda model: model),
    )


def prompt(question: str) -> list[dict[str, str]]:
    return [SYSTEM, {"role": "user", "content": question}]


def test_tool_results_are_in_the_sequence_and_out_of_the_loss(
    server: RunningServer, renderer: ChatRenderer
) -> None:
    question = "What is 256 times 37?"
    turns = [call("calculate_math", expression="256*37"), "The result is 9472."]
    engine = ScriptedEngine(renderer, {question: turns})
    rollout = rollouts(renderer, server.url)
    out = rollout([prompt(question)], trainer(engine, [{"extra_info": {"index": 3}}]))
    (ids,), (mask,) = out["completion_ids"], out["env_mask"]
    assert out["prompt_ids"] == [renderer.ids(prompt(question), _tools(server))]
    decode = renderer.tokenizer.decode
    model_text = decode([t for t, m in zip(ids, mask, strict=True) if m])
    placed_text = decode([t for t, m in zip(ids, mask, strict=True) if not m])
    assert model_text == turns[0] + "<|im_end|>" + turns[1] + "<|im_end|>"
    truth = get_catalog().execute(
        "calculate_math", {"expression": "256*37"}, ToolContext.reference("t"), "mock"
    )
    response = placed_text.split("<tool_response>\n", 1)[1].split("\n</tool_response>", 1)[0]
    assert json.loads(response) == truth  # the real server's answer, masked out of the loss
    assert placed_text.endswith("<|im_start|>assistant\n")
    assert rollout.last[0].stop == "answer"


def _tools(server: RunningServer) -> list[dict[str, Any]]:
    from training.cpu_backend.episodes import list_tools

    return list_tools(server.url)


def test_each_rollout_has_its_own_tool_session(
    server: RunningServer, renderer: ChatRenderer
) -> None:
    """Two rollouts of the same row: the second does not read the first one's note."""
    saves = "Remember gate B12 for my trip, then tell me."
    reads = "What did I note for my trip?"
    engine = ScriptedEngine(
        renderer,
        {
            saves: [
                call("save_note", title="trip", content="gate B12"),
                call("read_note", title="trip"),
                "Noted: gate B12.",
            ],
            reads: [call("read_note", title="trip"), "I have no note."],
        },
    )
    rollout = rollouts(renderer, server.url)
    row = {"extra_info": {"index": 7}}
    rollout([prompt(saves)], trainer(engine, [row]))
    first = rollout.last[0]
    rollout([prompt(reads)], trainer(engine, [row]))
    second = rollout.last[0]
    assert "gate B12" in first.calls[1].result
    assert "gate B12" not in second.calls[0].result
    assert first.calls[0].id and {c.name for c in first.calls} == {"save_note", "read_note"}


def test_the_completion_budget_cuts_the_rollout(
    server: RunningServer, renderer: ChatRenderer
) -> None:
    question = "What is 256 times 37?"
    turns = [call("calculate_math", expression="256*37"), "The result is 9472."]
    engine = ScriptedEngine(renderer, {question: turns})
    rollout = rollouts(renderer, server.url, budget=60)
    out = rollout([prompt(question)], trainer(engine, [{}]))
    assert 0 < len(out["completion_ids"][0]) <= 60  # the tool results would not fit
    assert rollout.last[0].stop == "length"
    assert out["env_mask"][0] == [1] * len(out["completion_ids"][0])  # nothing placed after


def test_a_dead_tool_server_stops_the_batch_with_a_clear_error(renderer: ChatRenderer) -> None:
    engine = ScriptedEngine(renderer, {"q": ["hi"]})
    dead = rollouts(renderer, "http://127.0.0.1:9/mcp")
    dead.tool_timeout_s = 2
    with pytest.raises(RolloutError, match=r"Is the MCP server at http://127\.0\.0\.1:9/mcp up"):
        dead([prompt("q")], trainer(engine, [{}]))


def test_the_real_engine_on_the_tiny_model(server: RunningServer, tmp_path: Path) -> None:
    """The in-process engine on a real (random) model: every rollout's tokens are the
    rendered prompt plus turns whose mask marks only sampled tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.model.tiny import build_tiny_model

    model_dir = build_tiny_model(tmp_path / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    renderer = cpu_renderer(tokenizer, False)
    settings = EpisodeSettings(max_turns=2, max_tokens=24, temperature=1.0, completion_budget=48)
    rollout = EpisodeRollouts(renderer, server.url, settings, threads=1)
    batch = [prompt("What is 2 + 2?")] * 4
    model.train()  # as TRL holds it between steps
    threads_seen: set[int] = set()  # every decode step's output head, by thread (a real hook)
    hook = model.get_output_embeddings().register_forward_pre_hook(
        lambda *_: threads_seen.add(threading.get_ident())
    )
    out = rollout(
        batch,
        SimpleNamespace(
            model=model,
            toolrl_batch_rows=[{}] * 4,
            accelerator=SimpleNamespace(unwrap_model=lambda m: m),
        ),
    )
    hook.remove()
    assert model.training  # generation ran in eval mode and left it as it found it
    # the engine stepped on this (the trainer's) thread, the episodes elsewhere
    assert threads_seen == {threading.get_ident()}
    for ids, mask, trajectory in zip(
        out["completion_ids"], out["env_mask"], rollout.last, strict=True
    ):
        assert len(ids) == len(mask) and 0 < len(ids) <= 48
        sampled = [t for turn in trajectory.turns for t in turn.token_ids]
        assert [t for t, m in zip(ids, mask, strict=True) if m] == sampled
    assert out["prompt_ids"][0] == renderer.ids(batch[0], _tools(server))


def test_dynamic_sampling_replaces_a_group_without_reward_spread(
    server: RunningServer, renderer: ChatRenderer
) -> None:
    """Groups of two: one group whose two rollouts score alike is replaced by a drawn train
    row whose rollouts differ; the group with spread is kept; the reward sees the
    replacement's ground truth. The scorer here is the test's own (1 for "right")."""
    flat, kept, useless, useful = (
        "Alike question?",
        "Split question?",
        "Other alike question?",
        "Replacement question?",
    )
    engine = ScriptedEngine(
        renderer,
        {
            flat: ["right", "right"],
            kept: ["right", "wrong"],
            useless: ["wrong", "wrong"],
            useful: ["wrong", "right"],
        },
    )

    def row(question: str, index: int) -> dict[str, Any]:
        return {
            "prompt": prompt(question),
            "reward_model": {"ground_truth": question},
            "extra_info": {"index": index, "split": "train"},
        }

    def score(ids: Any, truths: Any) -> list[float]:
        return [float("right" in renderer.tokenizer.decode(list(i))) for i in ids]

    batch = [row(flat, 0), row(flat, 0), row(kept, 1), row(kept, 1)]
    rollout = rollouts(renderer, server.url)
    rollout.resampling = Resampling([row(useless, 2), row(useful, 3)], score, rounds=2, seed=0)
    metrics: dict[str, dict[str, list[float]]] = {"train": defaultdict(list)}
    state = trainer(engine, batch)
    state.num_generations, state._metrics = 2, metrics
    out = rollout([r["prompt"] for r in batch], state)

    assert [info["index"] for info in out["extra_info"]] == [3, 3, 1, 1]
    assert out["reward_model"][0] == {"ground_truth": useful}
    texts = [renderer.tokenizer.decode(ids) for ids in out["completion_ids"]]
    assert ["right" in t for t in texts] == [False, True, True, False]
    assert rollout.last_stats["flat_groups_drawn"] == 1
    assert rollout.last_stats["flat_groups_kept"] == 0
    assert rollout.last_stats["extra_rollouts"] in (2, 4)  # the alike draw first, or not
    assert metrics["train"]["dynamic_sampling/flat_groups_kept"] == [0.0]


def test_flat_groups_are_the_runs_of_equal_rewards() -> None:
    assert flat_groups([1, 1, 0, 1, 0.5, 0.5], 2) == [0, 2]
    assert flat_groups([0.2, 0.2, 0.2, 0.2], 4) == [0]
    assert flat_groups([], 4) == []
