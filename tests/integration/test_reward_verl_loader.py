"""verl loads OUR reward function from the overrides we ship, through its own loader.

Composes verl's real `ppo_trainer` config (Hydra, verl's config dir) with the overrides,
resolves the function with `verl.trainer.ppo.reward.get_custom_reward_fn` (what the reward
loop workers call), and runs verl's registered `naive` reward manager on a DataProto, so the
whole path verl takes from config to score is exercised on CPU.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from training.rewards.samples import render_hermes, render_xml, tool_turn
from training.rewards.score import compute_score

verl = pytest.importorskip("verl")
hydra = pytest.importorskip("hydra")
torch = pytest.importorskip("torch")

from hydra import compose, initialize_config_dir  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.reward import get_custom_reward_fn, load_reward_manager  # noqa: E402

pytestmark = pytest.mark.integration

ENTRY = Path(__file__).resolve().parents[2] / "training" / "rewards" / "verl_entry.py"
CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"
GT = (
    '{"answers": ["9472"], "category": "single", "schema_version": 1, "steps": '
    '[[{"arguments": {"expression": "256*37"}, "name": "calculate_math"}]]}'
)
OVERRIDES = [
    f"reward.custom_reward_function.path={ENTRY}",
    "reward.custom_reward_function.name=compute_score",
    "reward.reward_manager.name=naive",
    "+reward.custom_reward_function.reward_kwargs.call_format=hermes",
]


def compose_config(overrides: list[str]) -> Any:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


class CharTokenizer:
    """Code points as ids; `<|im_end|>` (id 0x110000) is special and skipped on request,
    the way verl's naive manager decodes (skip_special_tokens=True)."""

    IM_END = 0x110000

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        values = [int(i) for i in ids]
        return "".join(
            "<|im_end|>" if v == self.IM_END else chr(v)
            for v in values
            if not (skip_special_tokens and v == self.IM_END)
        )

    def encode(self, text: str) -> list[int]:
        return [ord(ch) for ch in text]


def test_verl_loader_resolves_our_compute_score_and_passes_reward_kwargs() -> None:
    config = compose_config(OVERRIDES)
    fn = get_custom_reward_fn(config)
    assert isinstance(fn, functools.partial)
    assert fn.args[0] is compute_score  # the very function object, loaded by file path
    assert fn.args[1] == {"call_format": "hermes"}
    good = render_hermes("calculate_math", {"expression": "256*37"})
    good += tool_turn(['{"result": 9472}']) + "It is 9472."
    out = fn(data_source="toolrl/synthetic", solution_str=good, ground_truth=GT, extra_info={})
    assert out == compute_score("toolrl/synthetic", good, GT, {}, call_format="hermes")
    assert out["score"] == 3.0
    # reward_kwargs reached the function: an XML call is a format error under hermes
    xml = render_xml("calculate_math", {"expression": "256*37"}) + tool_turn(["9472"]) + "9472"
    assert (
        fn(data_source="d", solution_str=xml, ground_truth=GT, extra_info={})["malformed_calls"]
        == 1.0
    )


def test_legacy_top_level_key_composes_but_is_ignored() -> None:
    legacy = [f"custom_reward_function.path={ENTRY}", "custom_reward_function.name=compute_score"]
    config = compose_config(legacy)
    assert config.custom_reward_function.path == str(ENTRY)  # composes without complaint
    assert get_custom_reward_fn(config) is None  # ...and verl's loader never sees it


def test_verl_naive_reward_manager_scores_a_rollout_with_our_function() -> None:
    config = compose_config(OVERRIDES)
    tokenizer = CharTokenizer()
    manager = load_reward_manager(config, tokenizer)
    prompt = tokenizer.encode("user: what is 256*37?\nassistant\n")
    response = tokenizer.encode(render_hermes("calculate_math", {"expression": "256*37"}))
    response += [CharTokenizer.IM_END]
    response += tokenizer.encode(tool_turn(['{"result": 9472}']) + "256*37 = 9472")
    response += [CharTokenizer.IM_END]
    pad = 8
    prompts = torch.tensor([prompt])
    responses = torch.tensor([response + [0] * pad])
    attention = torch.tensor([[1] * (len(prompt) + len(response)) + [0] * pad])
    data = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": attention},
        non_tensors={
            "data_source": np.array(["toolrl/synthetic"], dtype=object),
            "reward_model": np.array([{"ground_truth": GT}], dtype=object),
            "extra_info": np.array([{"index": 0}], dtype=object),
        },
    )
    result = manager.loop.run_until_complete(manager.run_single(data))
    assert result["reward_score"] == 3.0
    extra = result["reward_extra_info"]
    assert extra["tool_alignment"] == 0.5
    assert extra["ground_truth_match"] == 2.5
    assert extra["malformed_calls"] == 0.0


class _FixedJudge(BaseHTTPRequestHandler):
    """A scripted OpenAI-compatible judge: every trajectory scores 0.75."""

    requests = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ids = re.findall(r'<trajectory id="(\d+)">', body["messages"][-1]["content"])
        scores = [{"trajectory_id": i, "explanation": "ok", "score": 0.75} for i in ids]
        content = json.dumps({"scores": scores})
        payload = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
        type(self).requests += 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        return


def test_verl_naive_manager_runs_the_group_judge_against_scripted_openai_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from training.rewards import judged

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _FixedJudge)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("RULER_BASE_URL", f"http://127.0.0.1:{httpd.server_address[1]}/v1")
    monkeypatch.setenv("RULER_JUDGE_WEIGHT", "0.5")
    judged._STATE.clear()
    try:
        config = compose_config(
            [
                f"reward.custom_reward_function.path={ENTRY}",
                "reward.custom_reward_function.name=compute_score_judged",
                "reward.reward_manager.name=naive",
                "+reward.custom_reward_function.reward_kwargs.group_size=2",
            ]
        )
        manager = load_reward_manager(config, CharTokenizer())
        tokenizer = CharTokenizer()
        prompt = tokenizer.encode("user: what is 256*37?\nassistant\n")
        text = render_hermes("calculate_math", {"expression": "256*37"})
        text += tool_turn(['{"result": 9472}']) + "256*37 = 9472"
        response = tokenizer.encode(text)
        data = DataProto.from_dict(
            tensors={
                "prompts": torch.tensor([prompt]),
                "responses": torch.tensor([response]),
                "attention_mask": torch.tensor([[1] * (len(prompt) + len(response))]),
            },
            non_tensors={
                "data_source": np.array(["toolrl/synthetic"], dtype=object),
                "reward_model": np.array([{"ground_truth": GT}], dtype=object),
                "extra_info": np.array([{"index": 5}], dtype=object),
            },
        )

        async def both() -> list[dict[str, Any]]:
            return list(await asyncio.gather(manager.run_single(data), manager.run_single(data)))

        results = manager.loop.run_until_complete(both())
    finally:
        httpd.shutdown()
        judged._STATE.clear()
    assert _FixedJudge.requests == 1  # the two rollouts of prompt 5 were judged together
    for result in results:
        # 0.5 x rule 3.0 + 0.5 x (judge 0.75 on [-3, 3] = 1.5)
        assert result["reward_score"] == pytest.approx(2.25)
        assert result["reward_extra_info"]["rule_score"] == 3.0
        assert result["reward_extra_info"]["judge_fallback"] == 0.0
