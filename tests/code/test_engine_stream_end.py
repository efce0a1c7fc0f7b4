"""The end of a streamed reply: tokens the engine decoded after the stream loop last looked
still reach the client. (The loop and the engine thread race; the reply that finished
between two looks once lost its last word: `...redurender` against `...redurender hidden`.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from serving.answer_stream import AnswerStream
from serving.engine.engine import Request, Sampling
from serving.engine.server import EngineServer, ModelHandle
from serving.renderer import ChatRenderer
from training.model.tokenizer import build_tokenizer


class RecordingWriter:
    """Stands in for the SSE response: keeps the deltas the server would have sent."""

    def __init__(self) -> None:
        self.deltas: list[tuple[dict[str, Any], str | None]] = []

    async def delta(self, delta: dict[str, Any], finish: str | None = None, **_: Any) -> None:
        self.deltas.append((delta, finish))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return build_tokenizer(Path(tmp_path_factory.mktemp("tok")), "hermes", 8_192)


def _ended_stream(tokenizer: Any, whole: str, seen: str) -> str:
    """What the client holds after the server streamed `seen` and the reply ended as `whole`."""
    stop_ids = frozenset({int(tokenizer.eos_token_id)})
    server = EngineServer(ModelHandle("m", ChatRenderer(tokenizer), None, stop_ids))  # type: ignore[arg-type]
    request = Request([1], Sampling(40, 1.0, 1.0, stop_ids))
    request.tokens = list(tokenizer.encode(whole, add_special_tokens=False))
    request.finish = "length"
    prose = AnswerStream()
    sent = prose.replace(seen)
    out = RecordingWriter()
    asyncio.run(server._stream_end(out, prose, "", [], request))  # type: ignore[arg-type]
    content = sent + "".join(str(d.get("content", "")) for d, _ in out.deltas)
    assert out.deltas[-1] == ({}, "length")
    return content


def test_words_decoded_after_the_last_look_are_sent_before_the_stream_ends(
    tokenizer: Any,
) -> None:
    whole = "The answer is redurender hidden"
    assert _ended_stream(tokenizer, whole, "The answer is redurender") == whole


def test_a_stream_that_saw_everything_adds_nothing_twice(tokenizer: Any) -> None:
    whole = "The answer is redurender hidden"
    assert _ended_stream(tokenizer, whole, whole) == whole


def test_a_held_back_tail_is_released_at_the_end(tokenizer: Any) -> None:
    whole = "Tea at 5 <"  # '<' could have started a call; nothing more came
    assert _ended_stream(tokenizer, whole, whole) == whole
