"""The one prompt renderer: a conversation and its tools, through the model's own chat
template, into the text and token ids the model reads.

Every consumer goes through it: the CPU engine server (requests), the agent loop's raw path
and the in-process engine backend (rollouts, the quick eval), SFT (training examples with an
assistant mask) and the rollout budget (reference lengths). Before it there were five
renderings that disagreed in small ways (tool-call arguments as strings or objects, the
tool prompt with or without the system turn, a tokenizer whose `apply_chat_template` was
replaced at run time).

Why one class over a tokenizer and not the tokenizer itself: the template needs its
inputs normalised first (tool-call `arguments` as objects, which the XML template iterates
over; OpenAI function schemas for tools, never Python callables), and three derived
renderings (the tool-response suffix, the shared system prefix, the assistant mask) must
be computed the same way wherever they are used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Message = dict[str, Any]


class RenderError(ValueError):
    """The chat template cannot render these messages (a bad request, not a server bug)."""


def openai_function(tool: Mapping[str, Any]) -> Message:
    """One tool in OpenAI function form, the shape chat templates render: an MCP
    `tools/list` entry (`name`, `description`, `inputSchema`) is converted, an OpenAI
    function schema passes through."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), Mapping):
        return dict(tool)
    schema = tool.get("inputSchema")
    return {
        "type": "function",
        "function": {
            "name": str(tool.get("name") or ""),
            "description": str(tool.get("description") or ""),
            "parameters": schema
            if isinstance(schema, Mapping)
            else {"type": "object", "properties": {}},
        },
    }


def openai_tools(tools: Sequence[Mapping[str, Any]]) -> list[Message]:
    """MCP `tools/list` entries (or OpenAI schemas) as OpenAI functions; nameless dropped."""
    functions = [openai_function(tool) for tool in tools]
    return [f for f in functions if f["function"]["name"]]


def template_ready(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Messages as templates expect them: tool-call arguments as objects (the XML template
    iterates over them; a JSON string that does not parse becomes `{}`)."""
    ready: list[Message] = []
    for message in messages:
        calls = message.get("tool_calls")
        if not calls:
            ready.append(dict(message))
            continue
        fixed = []
        for call in calls:
            function = dict(call.get("function", call))
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    parsed = json.loads(arguments) if arguments.strip() else {}
                except ValueError:
                    parsed = {}
                function["arguments"] = parsed if isinstance(parsed, dict) else {}
            fixed.append({**call, "type": "function", "function": function})
        ready.append({**message, "tool_calls": fixed})
    return ready


@dataclass(frozen=True, slots=True)
class TrainingExample:
    """A whole conversation as token ids, with 1 on the tokens the model writes (assistant
    turns, their end-of-turn token included) and 0 elsewhere."""

    input_ids: list[int]
    assistant_mask: list[int]


@dataclass
class ChatRenderer:
    """Renders with `tokenizer`'s chat template (or `chat_template`, when given)."""

    tokenizer: Any
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Extra template variables, e.g. `{"enable_thinking": False}`."""
    chat_template: str | None = None

    def text(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """The prompt text; a template failure is a `RenderError` naming the cause."""
        kwargs: dict[str, Any] = dict(self.template_kwargs)
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        try:
            rendered = self.tokenizer.apply_chat_template(
                template_ready(messages),
                tools=openai_tools(tools) if tools else None,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **kwargs,
            )
        except Exception as exc:  # jinja raises anything; the caller's input is at fault
            raise RenderError(
                f"the chat template cannot render these messages: {str(exc)[:200]}"
            ) from exc
        return str(rendered)

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text (special tokens are in the text already)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def ids(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        return self.encode(self.text(messages, tools, add_generation_prompt))

    def system_prefix_ids(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
    ) -> list[int] | None:
        """The tokens every prompt with this system turn and these tools starts with (the
        system turn and the tool list), or None without a system turn: the engine keeps
        them once in its cache and shares them between requests."""
        if not messages or messages[0].get("role") != "system":
            return None
        return self.ids(messages[:1], tools, add_generation_prompt=False)

    def tool_suffix_ids(self, tool_messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The tokens that follow an assistant turn's end-of-turn token when its calls
        come back: the tool messages as the template wraps them, then the next generation
        prompt. Measured on a minimal conversation (with and without the tool messages),
        since the template alone knows how it frames tool results."""
        if not tool_messages:
            raise ValueError("tool_suffix_ids needs at least one tool message")
        name = str(tool_messages[0].get("name") or "tool")
        stub: list[Message] = [
            {"role": "user", "content": "stub"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": name, "arguments": {}}}],
            },
        ]
        before = self.ids(stub, add_generation_prompt=False)
        after = self.ids([*stub, *tool_messages], add_generation_prompt=True)
        end = self._end_of_turn_id()
        if end is not None and end in before:
            before = before[: len(before) - before[::-1].index(end)]
        if after[: len(before)] != before:
            raise RenderError(
                "the chat template renders earlier turns differently once tools reply"
            )
        return after[len(before) :]

    def training_example(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> TrainingExample:
        """Token ids of the whole conversation and its assistant mask. Each assistant
        turn's span is what rendering it adds to the conversation before it (generation
        prompt included in the earlier part), so any template works, with or without
        `{% generation %}` markers; tokens are mapped to spans by character offsets."""
        full = self.text(messages, tools, add_generation_prompt=False)
        spans: list[tuple[int, int]] = []
        for index, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            before = self.text(messages[:index], tools, add_generation_prompt=True)
            through = self.text(messages[: index + 1], tools, add_generation_prompt=False)
            if not full.startswith(before) or not full.startswith(through):
                raise RenderError(
                    "the chat template renders earlier turns differently once later ones "
                    "follow; an assistant mask cannot be taken from it"
                )
            spans.append((len(before), len(through)))
        encoded = self.tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(encoded["input_ids"])
        mask = [
            int(any(start <= begin and finish <= end for start, end in spans) and finish > begin)
            for begin, finish in encoded["offset_mapping"]
        ]
        return TrainingExample(ids, mask)

    def _end_of_turn_id(self) -> int | None:
        token = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(token, int) and token != self.tokenizer.unk_token_id:
            return token
        eos = self.tokenizer.eos_token_id
        return int(eos) if isinstance(eos, int) else None


def renderer_for_model(model_dir: str | Path, **template_kwargs: Any) -> ChatRenderer:
    """The renderer of a model directory: its own tokenizer and chat template, exactly what
    a server of that directory renders."""
    from transformers import AutoTokenizer

    return ChatRenderer(AutoTokenizer.from_pretrained(str(model_dir)), template_kwargs)
