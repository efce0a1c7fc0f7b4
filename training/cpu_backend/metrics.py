"""Quick held-out eval for the CPU backend: greedy multi-turn generation against the MCP
tools, read by the project's parser and scored against the dataset's ground truth.

This is the in-process number the training stage reports before and after each phase
(the full harness, served model and BFCL included, is `training/evaluation`). Per row,
the model answers the held-out prompt; every turn with calls is executed through the MCP
server and the results go back as tool messages, up to `max_turns` turns, as in a rollout.
The transcript is assembled as verl decodes it and scored by the project's reward.

Metrics (rates over rows):
- parseable_rate: rows that need tools where the model called at least one tool and every
  call attempt parsed and validated (no malformed call);
- tool_selection: rows that need tools whose valid calls name exactly the expected tools
  (as a multiset); over tool rows only, as `training/evaluation`'s tool_selection_accuracy
  (counting no-call rows too let a model that never calls score their share, ~20%);
- abstention_rate: rows that need no tool (irrelevance, clarification) with no call;
- exact_arguments: rows that need tools whose calls equal the expected calls, arguments
  included (order-free, free-text arguments only need to be present), with nothing extra;
- ground_truth_match: rows whose final answer earns the full ground-truth credit;
- malformed_rate: malformed calls over call attempts; mean_reward: the reward's mean score.

Generation is greedy through `generation.generate` (the tool prompt prefilled once per
batch of rows with the same system prompt).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from serving.toolcalls import ParsedCall, parse_tool_calls, split_transcript
from training.cpu_backend.generation import generate
from training.cpu_backend.reward import strip_special
from training.cpu_backend.tools import ToolSchema
from training.data.schema import Category, GroundTruth
from training.rewards.config import RewardConfig
from training.rewards.rule import score_rollout

ToolCaller = Callable[[str, dict[str, Any], str], str]
"""(tool name, arguments, session) -> the text the model reads."""
_NO_CALL = (Category.IRRELEVANCE, Category.CLARIFICATION)
_NO_CALL_NAMES = {c.value for c in _NO_CALL}


HEADLINE_RATES = (
    "parseable_rate",
    "tool_selection",
    "abstention_rate",
    "exact_arguments",
    "ground_truth_match",
)
"""The rates a stage is judged by (benchmarks and reports list them in this order)."""


@dataclass
class EvalResult:
    rows: int = 0
    parseable_rate: float = 0.0
    tool_selection: float = 0.0
    abstention_rate: float = 0.0
    exact_arguments: float = 0.0
    ground_truth_match: float = 0.0
    malformed_rate: float = 0.0
    mean_reward: float = 0.0
    mean_turns: float = 0.0
    seconds: float = 0.0
    generated_tokens: int = 0
    by_category: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per category: rows, success (tool rows: the exact expected calls and nothing else;
    no-tool rows: no call) and tool_selection (tool rows)."""
    examples: list[str] = field(default_factory=list)

    def as_metrics(self, prefix: str) -> dict[str, float]:
        values = asdict(self)
        values.pop("examples")
        values.pop("by_category")
        return {f"{prefix}/{key}": float(value) for key, value in values.items()}


@dataclass
class _Conversation:
    row: dict[str, Any]
    messages: list[dict[str, Any]]
    turns: list[str] = field(default_factory=list)
    responses: list[list[str]] = field(default_factory=list)
    done: bool = False


def transcript_of(turns: Sequence[str], responses: Sequence[Sequence[str]]) -> str:
    """Model turns and tool responses joined as verl decodes a multi-turn response."""
    parts: list[str] = []
    for index, turn in enumerate(turns):
        parts.append(turn)
        if index < len(responses) and responses[index]:
            blocks = "".join(f"\n<tool_response>\n{r}\n</tool_response>" for r in responses[index])
            parts.append(f"\nuser{blocks}\nassistant\n")
    return "".join(parts)


def _render(
    tokenizer: Any, conversation: _Conversation, schemas: list[ToolSchema], **kw: Any
) -> list[int]:
    ids = tokenizer.apply_chat_template(
        conversation.messages, tools=schemas, add_generation_prompt=True, tokenize=False, **kw
    )
    return list(tokenizer(str(ids), add_special_tokens=False)["input_ids"])


def _row_index(row: dict[str, Any]) -> str:
    extra = row.get("extra_info")
    return str(extra.get("index")) if isinstance(extra, dict) else str(id(row))


def _step(
    conversation: _Conversation,
    text: str,
    call_format: str,
    tools: ToolCaller,
    session: str,
    last_turn: bool,
) -> None:
    """Record one generated turn; execute its calls (or end the conversation)."""
    conversation.turns.append(text)
    parsed = parse_tool_calls(text, call_format)  # type: ignore[arg-type]
    named = [call for call in parsed.calls if call.name]
    if not named or last_turn:
        conversation.done = True
        return
    calls = [
        {"type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}}
        for c in named
    ]
    conversation.messages.append({"role": "assistant", "content": "", "tool_calls": calls})
    answers = []
    for call in named:
        result = tools(call.name, dict(call.arguments), session)
        answers.append(result)
        conversation.messages.append({"role": "tool", "name": call.name, "content": result})
    conversation.responses.append(answers)


def _valid_calls(transcript: str, call_format: str) -> tuple[list[ParsedCall], int]:
    calls: list[ParsedCall] = []
    for turn in split_transcript(transcript).turns:
        calls += parse_tool_calls(turn, call_format).calls  # type: ignore[arg-type]
    return [c for c in calls if c.valid], len(calls)


def evaluate(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    schemas: list[ToolSchema],
    tools: ToolCaller,
    reward_config: RewardConfig,
    max_turns: int = 4,
    max_new_tokens: int = 96,
    batch_size: int = 16,
    enable_thinking: bool = False,
) -> EvalResult:
    """Greedy multi-turn eval of `rows` (dataset rows); see the module docstring."""
    start = time.perf_counter()
    was_training = model.training
    model.eval()
    call_format = reward_config.call_format
    stop_ids = {int(tokenizer.convert_tokens_to_ids(t)) for t in ("<|im_end|>", "<|endoftext|>")}
    by_system: dict[str, list[_Conversation]] = {}
    for row in rows:
        messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in row["prompt"]]
        by_system.setdefault(messages[0]["content"], []).append(_Conversation(row, messages))
    conversations = [c for group in by_system.values() for c in group]
    generated = 0
    for turn in range(max_turns):
        for group in by_system.values():
            active = [c for c in group if not c.done]
            if not active:
                continue
            prompts = [
                _render(tokenizer, c, schemas, enable_thinking=enable_thinking) for c in active
            ]
            outputs = generate(model, prompts, max_new_tokens, stop_ids, max_rows=batch_size)
            for conversation, ids in zip(active, outputs, strict=True):
                generated += len(ids)
                text = strip_special(tokenizer.decode(ids, skip_special_tokens=False))
                session = f"eval-{_row_index(conversation.row)}"
                _step(conversation, text, call_format, tools, session, turn == max_turns - 1)
    if was_training:
        model.train()
    return _summarise(conversations, reward_config, time.perf_counter() - start, generated)


def _summarise(
    conversations: Sequence[_Conversation], config: RewardConfig, seconds: float, generated: int
) -> EvalResult:
    result = EvalResult(rows=len(conversations), seconds=seconds, generated_tokens=generated)
    if not conversations:
        return result
    counts: Counter[str] = Counter()
    per_category: dict[str, Counter[str]] = {}
    attempts = malformed = 0
    rewards: list[float] = []
    for conversation in conversations:
        text = transcript_of(conversation.turns, conversation.responses)
        truth_json = conversation.row["reward_model"]["ground_truth"]
        truth = GroundTruth.from_json(truth_json)
        breakdown = score_rollout(text, truth_json, config)
        rewards.append(breakdown.score)
        valid, total = _valid_calls(text, config.call_format)
        attempts += total
        malformed += total - len(valid)
        needs_tools = truth.category not in _NO_CALL and bool(truth.expected_calls)
        expected_names = Counter(c.name for c in truth.expected_calls)
        category = per_category.setdefault(truth.category.value, Counter())
        category["rows"] += 1
        if needs_tools:
            counts["needs_tools"] += 1
            counts["parseable"] += bool(total) and len(valid) == total
            exact = (
                breakdown.matched_calls == len(truth.expected_calls)
                and len(valid) == total
                and breakdown.valid_calls - breakdown.matched_calls == 0
            )
            selected = Counter(c.name for c in valid) == expected_names and bool(valid)
            counts["exact"] += exact
            counts["selection"] += selected
            category["success"] += exact
            category["selection"] += selected
        else:
            counts["no_call_rows"] += 1
            counts["abstained"] += total == 0
            category["success"] += total == 0
        counts["truth"] += breakdown.ground_truth_match >= config.weights.ground_truth_max - 1e-9
        counts["turns"] += len(conversation.turns)
        if len(result.examples) < 3:
            result.examples.append(text[:400])
    rows = len(conversations)
    tool_rows = max(counts["needs_tools"], 1)
    result.parseable_rate = counts["parseable"] / tool_rows
    result.exact_arguments = counts["exact"] / tool_rows
    result.tool_selection = counts["selection"] / tool_rows
    result.abstention_rate = counts["abstained"] / max(counts["no_call_rows"], 1)
    result.ground_truth_match = counts["truth"] / rows
    result.malformed_rate = malformed / attempts if attempts else 0.0
    result.mean_reward = sum(rewards) / rows
    result.mean_turns = counts["turns"] / rows
    result.by_category = {
        name: {
            "rows": float(c["rows"]),
            "success": c["success"] / c["rows"],
            **(
                {"tool_selection": c["selection"] / c["rows"]} if name not in _NO_CALL_NAMES else {}
            ),
        }
        for name, c in sorted(per_category.items())
    }
    return result
