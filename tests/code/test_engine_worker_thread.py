"""The engine stepped in the caller's thread (`EngineWorker(own_thread=False).run_here`),
as the trainer's rollouts and quick evals do (`episodes.run_episodes`): why is in the
worker's docstring (torch's OpenMP pool is fast only on the thread that made it). Real
engine, real tiny model; the episodes' failures reach the caller instead of hanging it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import serving.agent.loop
from serving.engine.engine import Engine, Request, Sampling
from serving.engine.worker import EngineWorker
from serving.mcp_server.config import ServerConfig
from serving.mcp_server.server import start
from serving.toolcalls import active_registry, using_registry
from serving.toolcalls.registry import snapshot_registry
from training.cpu_backend.episodes import (
    EpisodeJob,
    EpisodeSettings,
    cpu_renderer,
    run_episodes,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.model.tiny import build_tiny_model

    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    return AutoModelForCausalLM.from_pretrained(str(model_dir)), AutoTokenizer.from_pretrained(
        str(model_dir)
    )


def _threads_running(model: Any) -> tuple[set[int], Any]:
    """Record the thread of every output-head pass of `model` (a real forward hook)."""
    seen: set[int] = set()
    head = model.get_output_embeddings()  # every decode step ends in it, as the engine runs it
    handle = head.register_forward_pre_hook(lambda *_: seen.add(threading.get_ident()))
    return seen, handle


def test_run_here_steps_in_the_calling_thread_until_closed(tiny: tuple[Any, Any]) -> None:
    model, _ = tiny
    model.eval()
    worker = EngineWorker(Engine(model, max_rows=4), threads=1, own_thread=False)
    requests = [
        Request(prompt=[5, 6, 7, 8 + row], sampling=Sampling(max_new_tokens=6, seed=row))
        for row in range(3)
    ]
    done = threading.Event()
    left = [len(requests)]

    def finished(_: Request) -> None:
        left[0] -= 1
        if left[0] == 0:
            done.set()

    def feed() -> None:
        for request in requests:
            request.on_finish = finished
            worker.submit(request)
        done.wait(60)
        worker.close()

    seen, handle = _threads_running(model)
    feeder = threading.Thread(target=feed)
    try:
        feeder.start()
        worker.run_here()  # returns once the feeder has closed it
        feeder.join(10)
    finally:
        handle.remove()
    assert done.is_set() and not feeder.is_alive()
    assert all(request.finish in {"stop", "length"} and request.tokens for request in requests)
    assert seen == {threading.get_ident()}  # every step on this thread, none elsewhere
    assert not [t for t in threading.enumerate() if t.name == "toolrl-engine"]


def test_a_worker_with_its_own_thread_refuses_to_run_here(tiny: tuple[Any, Any]) -> None:
    worker = EngineWorker(Engine(tiny[0], max_rows=2), threads=1)
    try:
        with pytest.raises(RuntimeError, match="already runs on its own thread"):
            worker.run_here()
    finally:
        worker.close()


def test_a_failing_episode_loop_is_raised_here_not_left_hanging(tiny: tuple[Any, Any]) -> None:
    """A malformed job (a message that is not a mapping) breaks the episode loop on its
    helper thread; the caller gets that error, and the engine it was stepping stops."""
    model, tokenizer = tiny
    model.train()
    renderer = cpu_renderer(tokenizer, False)
    settings = EpisodeSettings(max_turns=1, max_tokens=4)
    broken = EpisodeJob(messages=[42], session="s")  # type: ignore[list-item]
    with pytest.raises((TypeError, ValueError)):
        run_episodes(model, renderer, "http://127.0.0.1:9/mcp", [broken], settings, threads=1)
    assert model.training  # left in the mode it was found in
    assert not [t for t in threading.enumerate() if t.name == "toolrl-episodes" and t.is_alive()]


PACK_TOOL = {
    "type": "function",
    "function": {
        "name": "convert_time",
        "description": "A pack's own tool, not in the built-in catalog.",
        "parameters": {"type": "object", "properties": {"time": {"type": "string"}}},
    },
}


def test_the_episode_loop_judges_calls_by_the_registry_installed_here(
    tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pack dataset's tools are installed with `using_registry` in the trainer's thread;
    the loop's parser, on the helper thread, must judge calls by them (each turn's
    `Agent._parse_raw` parses with `active_registry()`). It once ran in a new
    thread's empty context: every call to a pack tool read as `unknown_function`, the time
    pack's quick eval read 39% parseable where 88% picked the right tool, and the format
    guard replaced GRPO with more SFT. Real pieces: the tiny model, the engine, the MCP
    server in mock mode on loopback; the turn parser is wrapped (a spy, it
    still parses) to record the registry it would use."""
    model, tokenizer = tiny
    seen: list[Any] = []

    parse_turn = serving.agent.loop.Agent._parse_raw

    def spying_parse(agent: Any, turn: Any) -> None:
        seen.append(active_registry())
        parse_turn(agent, turn)

    monkeypatch.setattr(serving.agent.loop.Agent, "_parse_raw", spying_parse)
    pack = snapshot_registry([PACK_TOOL])
    job = EpisodeJob(messages=[{"role": "user", "content": "What time is it?"}], session="s")
    settings = EpisodeSettings(max_turns=1, max_tokens=4)
    renderer = cpu_renderer(tokenizer, False)
    mock = ServerConfig(mode="mock", port=0, workers=1, log_level="warning")
    with start(mock) as mcp, using_registry(pack):
        [trajectory] = run_episodes(model, renderer, mcp.url, [job], settings, threads=1)
    assert trajectory.stop != "error", trajectory
    assert seen and all(registry is pack for registry in seen)
    assert "convert_time" in seen[0]
