"""The streaming prose filter: whatever the chunking, what was sent never has to be taken
back, adds up to the whole reply's visible prose, and never shows a call, a stop string or a
reasoning block, not even their first characters."""

from __future__ import annotations

import itertools

from hypothesis import example, given, settings
from hypothesis import strategies as st

from serving.answer_stream import AnswerStream, visible

WORDS = st.sampled_from(
    [
        "Hello",
        " world",
        "<",
        "tool",
        "_call>",
        "<tool_call>",
        "<think>",
        "</think>",
        "END",
        "EN",
        "D",
        " ",
        "\n",
        "é",
        "\ufffd",
        "<function=",
        "x",
    ]
)


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=400, deadline=None)
@given(st.lists(WORDS, max_size=14).map("".join), st.lists(st.integers(0, 200), max_size=12))
# found by Hypothesis on a clean clone: a stop string split by a reasoning block that vanishes
@example(text="EN<think></think>D", cuts=[3])
@example(text="EN<think></think>D", cuts=[9])
@example(text="<tool_c<think>x</think>all>", cuts=[8])
def test_deltas_add_up_to_the_visible_prose_whatever_the_chunking(
    text: str, cuts: list[int]
) -> None:
    stream = AnswerStream(stops=["END"])
    sent = "".join(stream.feed(piece) for piece in _split(text, cuts))
    sent += stream.finish()
    assert sent == visible(text, ["END"], final=True).text
    assert "<tool_call" not in sent and "<function=" not in sent
    assert "END" not in sent


@settings(max_examples=400, deadline=None)
@given(st.lists(WORDS, max_size=10).map("".join), st.lists(WORDS, max_size=6).map("".join))
@example(text="Hello <think>", continuation="</think><function=")  # found by Hypothesis in CI
def test_what_was_sent_stays_true_whatever_comes_next(text: str, continuation: str) -> None:
    stream = AnswerStream(stops=["END"])
    sent = "".join(stream.feed(char) for char in text)
    assert visible(text + continuation, ["END"], final=True).text.startswith(sent)


def test_a_call_ends_the_prose_and_reasoning_never_shows() -> None:
    stream = AnswerStream()
    pieces = ["  Let", " me <th", "ink>plan</th", "ink> check.", "\n<tool", "_call>{}"]
    sent = "".join(stream.feed(p) for p in pieces)
    assert sent == "Let me  check."
    assert stream.ended_by == "call"
    assert stream.finish() == ""


def test_a_stop_string_ends_the_prose_before_it() -> None:
    stream = AnswerStream(stops=["STOP"])
    sent = "".join(stream.feed(p) for p in ["Paris is S", "TO", "P sunny"])
    assert sent == "Paris is" and stream.ended_by == "stop"


def test_held_back_text_is_released_when_it_turns_out_to_be_prose() -> None:
    stream = AnswerStream()
    assert stream.feed("a <") == "a"
    assert stream.feed(" b") == " < b"
    assert stream.feed(" <too") == ""
    assert stream.finish() == " <too"


def test_half_a_character_waits_for_its_other_half() -> None:
    stream = AnswerStream()
    assert stream.replace("caf\ufffd") == "caf"
    assert stream.replace("café") == "é"
