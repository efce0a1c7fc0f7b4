"""The great-expectations suite for a dataset version, and how it is run.

Two batches are validated: the row frame (raw + derived check columns) and the coverage
frame (one row per category and per tool). Results and a Data Docs HTML site are written
under `DIR/validation/`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

from training.data.check_columns import TRUTH_FLAGS
from training.data.config import ValidationConfig
from training.data.schema import AGENT_NAME, DATA_SOURCE, Category, Difficulty

ROWS_SUITE = "toolrl_dataset_rows"
COVERAGE_SUITE = "toolrl_dataset_coverage"
SITE = "toolrl_local"

#: Flags computed by `row_truth_flags` and the overlap pass: each must be True (or False).
MUST_BE_TRUE = (*TRUTH_FLAGS, "split_consistent", "user_matches_query")
MUST_BE_FALSE = ("overlap_exact", "overlap_shape", "overlap_template")


def _gx_expectations() -> Any:
    """great-expectations' expectation classes, imported late (4 s import) and untyped."""
    import importlib

    return importlib.import_module("great_expectations.expectations")


def row_expectations(config: ValidationConfig) -> list[Any]:
    gxe = _gx_expectations()

    required = (
        "query",
        "category",
        "difficulty",
        "language",
        "agent_name",
        "data_source",
        "index",
        "split",
        "template_id",
    )
    expectations: list[Any] = [
        gxe.ExpectTableRowCountToBeBetween(min_value=config.min_rows),
        *[gxe.ExpectColumnValuesToNotBeNull(column=c) for c in required],
        gxe.ExpectColumnValuesToBeInSet(column="agent_name", value_set=[AGENT_NAME]),
        gxe.ExpectColumnValuesToBeInSet(column="data_source", value_set=[DATA_SOURCE]),
        gxe.ExpectColumnValuesToBeInSet(column="category", value_set=[c.value for c in Category]),
        gxe.ExpectColumnValuesToBeInSet(
            column="difficulty", value_set=[d.value for d in Difficulty]
        ),
        gxe.ExpectColumnValuesToBeInSet(column="language", value_set=list(config.languages)),
        gxe.ExpectColumnValuesToBeInSet(column="split", value_set=["train", "test"]),
        gxe.ExpectColumnValuesToBeInSet(column="prompt_roles", value_set=["system,user"]),
        gxe.ExpectColumnValuesToBeUnique(column="query"),
        gxe.ExpectColumnValuesToBeUnique(column="query_norm"),
        gxe.ExpectColumnValuesToBeUnique(column="index"),
        gxe.ExpectColumnValuesToBeBetween(column="num_steps", min_value=0, max_value=8),
        gxe.ExpectColumnValuesToBeBetween(
            column="prompt_tokens", min_value=1, max_value=config.max_prompt_tokens
        ),
        gxe.ExpectColumnValueLengthsToBeBetween(column="query", min_value=2, max_value=2_000),
    ]
    expectations += [
        gxe.ExpectColumnValuesToBeInSet(column=c, value_set=[True]) for c in MUST_BE_TRUE
    ]
    expectations += [
        gxe.ExpectColumnValuesToBeInSet(column=c, value_set=[False]) for c in MUST_BE_FALSE
    ]
    return expectations


def coverage_expectations(config: ValidationConfig) -> list[Any]:
    gxe = _gx_expectations()
    from great_expectations.expectations.row_conditions import Column

    return [
        gxe.ExpectColumnValuesToBeBetween(
            column="deviation",
            min_value=0.0,
            max_value=config.category_tolerance,
            row_condition=Column("kind") == "category",
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="count",
            min_value=config.min_rows_per_tool,
            row_condition=Column("kind") == "tool",
        ),
    ]


def _update_docs_action() -> Any:
    import importlib

    return importlib.import_module("great_expectations.checkpoint").UpdateDataDocsAction


def _quiet_great_expectations() -> None:
    for name in (
        "great_expectations",
        "great_expectations.core",
        "great_expectations.data_context",
    ):
        logging.getLogger(name).setLevel(logging.WARNING)


def run_suites(
    rows: pd.DataFrame, coverage: pd.DataFrame, config: ValidationConfig, out_dir: Path
) -> tuple[list[dict[str, Any]], str]:
    """Run both suites; return one dict per expectation result and the Data Docs index path."""
    import great_expectations as gx

    _quiet_great_expectations()
    out_dir.mkdir(parents=True, exist_ok=True)
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    site_dir = out_dir / "data_docs"
    context.add_data_docs_site(
        site_name=SITE,
        site_config={
            "class_name": "SiteBuilder",
            "store_backend": {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": str(site_dir),
            },
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        },
    )
    source = context.data_sources.add_pandas("toolrl")
    results: list[dict[str, Any]] = []
    for name, frame, expectations in (
        (ROWS_SUITE, rows, row_expectations(config)),
        (COVERAGE_SUITE, coverage, coverage_expectations(config)),
    ):
        batch = source.add_dataframe_asset(name=name).add_batch_definition_whole_dataframe(name)
        suite = context.suites.add(gx.ExpectationSuite(name=name))
        for expectation in expectations:
            suite.add_expectation(expectation)
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch, suite=suite)
        )
        checkpoint = context.checkpoints.add(
            gx.Checkpoint(
                name=f"{name}_checkpoint",
                validation_definitions=[definition],
                actions=[_update_docs_action()(name="docs", site_names=[SITE])],
                result_format={"result_format": "SUMMARY", "partial_unexpected_count": 5},
            )
        )
        outcome = checkpoint.run(batch_parameters={"dataframe": frame})
        for validation in outcome.run_results.values():
            for item in validation.results:
                summary = item.result or {}
                config_: Any = item.expectation_config
                results.append(
                    {
                        "suite": name,
                        "expectation": config_.type,
                        "column": config_.kwargs.get("column"),
                        "success": bool(item.success),
                        "unexpected_count": summary.get("unexpected_count"),
                        "examples": [
                            str(v)[:160] for v in summary.get("partial_unexpected_list", [])
                        ],
                        "observed": summary.get("observed_value"),
                    }
                )
    return results, str(site_dir / "index.html")
