"""Hypothesis fuzzing of every tool's arguments: only ToolError ever escapes, and fast."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serving.tools import ToolContext, ToolError, get_catalog

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def arguments_for(name: str) -> st.SearchStrategy[Any]:
    properties = get_catalog().get(name).parameters["properties"]
    return (
        st.dictionaries(
            st.sampled_from(sorted(properties)) | st.text(max_size=10), JSON, max_size=5
        )
        | JSON
    )


@pytest.mark.timeout(120)  # catches a hang; speed is bench_hostile_inputs.py's figure
@pytest.mark.parametrize("name", get_catalog().names)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_arbitrary_arguments_never_crash_a_tool(name: str, data: st.DataObject) -> None:
    arguments = data.draw(arguments_for(name))
    try:
        result = get_catalog().execute(name, arguments, ToolContext.reference())
    except ToolError as exc:
        assert str(exc)
    else:
        assert isinstance(result, dict)
