"""`cpu.grpo_own_templates`: part of a category's train phrasings are GRPO's alone, so SFT
never trains on them (`prompt_pool.grpo_template_rows`, `sft.grpo_own_rows`). What would
break: SFT trains on a row of such a template, an intent loses its only train phrasing to
GRPO, the choice depends on anything but the template ids, or the report's count is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from serving.tools import get_catalog
from testkit.pipeline_specs import tiny_cpu_spec
from training.cpu_backend.episodes import cpu_renderer
from training.cpu_backend.prompt_pool import grpo_template_rows, prompt_pool
from training.cpu_backend.sft import (
    grpo_own_rows,
    sft_examples,
    sft_row_order,
    tokenize_rows,
    trained_rows,
    trajectory,
)
from training.data.packs.split import held_out
from training.spec.model import CpuSection, SpecError, TrainingSpec, load_spec, with_settings

SPEC = Path(__file__).resolve().parents[2] / "training" / "specs" / "cpu_smollm2.yaml"


def spec(**cpu: Any) -> TrainingSpec:
    return tiny_cpu_spec("own-templates", {"sft_batch_size": 4, **cpu})


def intent_language(template: str) -> str:
    return template.rsplit("/", 1)[0]


def test_each_intent_gives_grpo_a_quarter_of_its_train_phrasings_and_keeps_one(
    builtin_data_300: Path,
) -> None:
    frame = pd.read_parquet(builtin_data_300 / "train.parquet")
    own = grpo_template_rows(frame, ["clarification"])
    assert own, "the built-in data has clarification intents with two train phrasings"
    assert set(frame.loc[list(own), "category"]) == {"clarification"}
    clarification = frame[frame["category"] == "clarification"]
    templates: dict[str, set[str]] = {}
    for template in clarification["template_id"]:
        templates.setdefault(intent_language(template), set()).add(template)
    own_templates = set(frame.loc[list(own), "template_id"])
    for group, members in templates.items():
        mine = {t for t in own_templates if intent_language(t) == group}
        assert mine == held_out(sorted(members)), group
        assert members - mine, f"{group} keeps a phrasing for SFT"
    rows_of_own = clarification[clarification["template_id"].isin(list(own_templates))]
    assert set(rows_of_own.index) == own, "every row of those templates, and only those"
    shuffled = frame.sample(frac=1.0, random_state=7)
    again = grpo_template_rows(shuffled, ["clarification"])
    assert again == own, "the choice depends on the template ids, not on the row order"
    assert grpo_template_rows(frame, []) == frozenset()


def test_sft_never_trains_on_grpo_s_rows_even_when_it_cycles_the_split(
    builtin_data_300: Path, tiny_model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    train_file = builtin_data_300 / "train.parquet"
    frame = pd.read_parquet(train_file)
    run = spec(grpo_own_templates=["clarification", "irrelevance"])
    own = grpo_own_rows(run, frame)
    assert own == grpo_own_rows(run, train_file), "from the frame or from the file alike"
    steps = 2 * len(frame) // 4  # twice through the split: every other row comes up
    assert not set(sft_row_order(frame, steps, 4, 0, held_back=own)) & own
    assert not trained_rows(run, train_file, steps, steps) & own
    plain = trained_rows(spec(), train_file, steps, steps)
    assert plain & own, "without the option SFT does train on them"
    assert sft_row_order(frame, steps, 4, 0) == sft_row_order(frame, steps, 4, 0, held_back=set())

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    schemas = list(get_catalog().openai_schemas())
    records = frame.to_dict("records")
    own_examples, _ = tokenize_rows(
        cpu_renderer(tokenizer, False), [trajectory(records[i]) for i in own], schemas, 4_096
    )
    examples, _ = sft_examples(run, train_file, tokenizer, schemas, steps)
    seen = {tuple(e["input_ids"]) for e in examples}
    assert seen and not seen & {tuple(e["input_ids"]) for e in own_examples}
    plain_examples, _ = sft_examples(spec(), train_file, tokenizer, schemas, steps)
    assert {tuple(e["input_ids"]) for e in plain_examples} & {
        tuple(e["input_ids"]) for e in own_examples
    }


def test_holding_rows_back_keeps_the_rest_of_sft_s_plan(builtin_data_300: Path) -> None:
    """The plan without GRPO's rows is the plain plan with each of them swapped for an unused
    row of its group: every other row in the same batch and place. A trial of the option
    then starts from nearly the same SFT, not from a reshuffled one."""
    frame = pd.read_parquet(builtin_data_300 / "train.parquet")
    own = grpo_template_rows(frame, ["clarification"])
    steps = 30  # 120 of the rows: unused ones are left in every group
    plain = sft_row_order(frame, steps, 4, 0)
    held = sft_row_order(frame, steps, 4, 0, held_back=own)
    assert set(plain) & own and not set(held) & own and len(held) == len(plain)
    system = [str(prompt[0]["content"]) for prompt in frame["prompt"]]
    for before, after in zip(plain, held, strict=True):
        if before in own:
            assert system[after] == system[before], "a row of the same group (tool prompt)"
            assert after not in plain, "one the plain plan does not use"
        else:
            assert after == before, "every other row in its place"
    assert len(set(held)) == len(set(plain)), "no swap repeats a row"


def test_grpo_s_pool_counts_the_rows_in_wordings_sft_never_saw(builtin_data_300: Path) -> None:
    train_file = builtin_data_300 / "train.parquet"
    run = spec(grpo_own_templates=["clarification"], grpo_fresh_rows=True)
    steps = 40
    trained = trained_rows(run, train_file, steps, steps)
    own = grpo_own_rows(run, train_file)
    categories = ["single", "clarification", "irrelevance"]
    pool = prompt_pool(train_file, categories, trained, needed=16, own_templates=own)
    assert pool.own_template_rows == len(own), "untrained, so every one is in the pool"
    drawn = {row["extra_info"]["index"] for row in pool.rows}
    frame = pd.read_parquet(train_file, columns=["extra_info"])
    assert {int(frame["extra_info"].iloc[i]["index"]) for i in own} <= drawn
    assert pool.as_dict()["own_template_rows"] == len(own)
    assert f"({len(own)} in wordings SFT never saw)" in pool.describe()
    assert "wordings" not in prompt_pool(train_file, categories, trained, needed=16).describe()


def test_off_by_default_and_only_categories_are_accepted() -> None:
    assert CpuSection().grpo_own_templates == []
    settings = ["cpu.grpo_own_templates=[clarification]"]
    assert with_settings(load_spec(SPEC), settings).cpu.grpo_own_templates == ["clarification"]
    with pytest.raises(SpecError, match="grpo_own_templates"):
        with_settings(load_spec(SPEC), ["cpu.grpo_own_templates=[clarify]"])
