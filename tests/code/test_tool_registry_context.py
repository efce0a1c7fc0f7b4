"""The installed tool registry is per context: concurrent asyncio tasks and threads each judge
calls by their own registry, never by one another's (serving/toolcalls/registry.py)."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from pathlib import Path

import pytest

from serving.toolcalls import (
    ToolRegistry,
    active_registry,
    catalog_registry,
    parse_tool_calls,
    registry_from_file,
    using_registry,
)
from serving.toolcalls.registry import SNAPSHOT_ENV, snapshot_registry


def _registry(tool: str) -> ToolRegistry:
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    return snapshot_registry([{"name": tool, "inputSchema": schema}])


def _call(tool: str) -> str:
    return f'<tool_call>{{"name": "{tool}", "arguments": {{"x": "1"}}}}</tool_call>'


def _judges_valid(tool: str) -> bool:
    """Whether the default registry of the caller's context accepts a call to `tool`."""
    return parse_tool_calls(_call(tool), "hermes").calls[0].valid


ALPHA, BETA = _registry("alpha_tool"), _registry("beta_tool")


def test_two_asyncio_tasks_each_judge_by_their_own_registry_concurrently() -> None:
    async def judge(registry: ToolRegistry, mine: str, other: str, ready: asyncio.Barrier) -> None:
        with using_registry(registry):
            await ready.wait()  # both registries are installed before either task checks
            for _ in range(3):
                assert active_registry() is registry
                assert _judges_valid(mine) and not _judges_valid(other)
                await asyncio.sleep(0)  # hand over to the other task in the middle
        assert active_registry() is catalog_registry()

    async def main() -> None:
        ready = asyncio.Barrier(2)
        await asyncio.gather(
            judge(ALPHA, "alpha_tool", "beta_tool", ready),
            judge(BETA, "beta_tool", "alpha_tool", ready),
        )
        assert active_registry() is catalog_registry()  # nothing leaked into the caller

    asyncio.run(main())


def test_a_task_inherits_the_registry_its_creator_had_installed() -> None:
    async def active_after_yield() -> ToolRegistry:
        await asyncio.sleep(0)
        return active_registry()

    async def main() -> None:
        with using_registry(ALPHA):
            inner = asyncio.create_task(active_after_yield())
        assert active_registry() is catalog_registry()
        assert await inner is ALPHA  # created inside the block: keeps its copy after it

    asyncio.run(main())


def test_a_thread_installs_its_own_registry_without_touching_the_callers() -> None:
    both_installed, checked = threading.Barrier(2), threading.Event()
    seen: dict[str, object] = {}

    def worker() -> None:
        seen["before"] = active_registry()  # a new thread starts with none installed
        with using_registry(BETA):
            both_installed.wait(timeout=10)
            seen["inside"] = active_registry()
            seen["judges_beta"] = _judges_valid("beta_tool")
            seen["judges_alpha"] = _judges_valid("alpha_tool")
            checked.wait(timeout=10)  # hold BETA while the main thread checks its own

    with using_registry(ALPHA):
        thread = threading.Thread(target=worker)
        thread.start()
        both_installed.wait(timeout=10)
        assert active_registry() is ALPHA
        assert _judges_valid("alpha_tool") and not _judges_valid("beta_tool")
        checked.set()
        thread.join(timeout=10)
    assert seen == {
        "before": catalog_registry(),
        "inside": BETA,
        "judges_beta": True,
        "judges_alpha": False,
    }
    assert active_registry() is catalog_registry()


def test_a_thread_run_in_a_copy_of_the_callers_context_sees_its_registry() -> None:
    seen: list[ToolRegistry] = []
    with using_registry(ALPHA):
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=context.run, args=(lambda: seen.append(active_registry()),)
        )
        thread.start()
        thread.join(timeout=10)
        via_to_thread = asyncio.run(asyncio.to_thread(active_registry))
    assert seen == [ALPHA]
    assert via_to_thread is ALPHA


def test_blocks_nest_and_an_exception_restores_the_outer_registry() -> None:
    with using_registry(ALPHA):
        inside: list[ToolRegistry] = []

        def fail_inside_beta() -> None:
            with using_registry(BETA):
                inside.append(active_registry())
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            fail_inside_beta()
        assert inside == [BETA]
        assert active_registry() is ALPHA
        with using_registry(None) as unchanged:  # None leaves the default in place
            assert unchanged is ALPHA
    assert active_registry() is catalog_registry()


def test_the_snapshot_env_var_is_the_default_and_an_installed_registry_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot = tmp_path / "tools.json"
    snapshot.write_text(json.dumps([{"name": "gamma_tool", "inputSchema": {"type": "object"}}]))
    monkeypatch.setenv(SNAPSHOT_ENV, str(snapshot))
    assert active_registry() is registry_from_file(snapshot)
    with using_registry(ALPHA):
        assert active_registry() is ALPHA
    seen: list[ToolRegistry] = []
    thread = threading.Thread(target=lambda: seen.append(active_registry()))
    thread.start()
    thread.join(timeout=10)
    assert seen == [registry_from_file(snapshot)]  # a thread falls back to the env var too
