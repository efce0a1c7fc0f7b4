"""`toolrl demo --pack NAME`: the demo's loop for a task pack's MCP server.

What changes against the built-in demo, and why:
- The dataset DAG generates from the pack (`PipelineConfig.pack`): every expected call runs
  on the real server, recorded into the version's call store.
- Training and evaluation replay that store (`retraining_stage.replay_for_pack`,
  `planned_tools`): the pack's server is never called by rollouts or by the evaluation.
- The champion has its own registry name (`toolrl-demo-<pack>`), so a champion trained on
  the built-in tools never starts a pack run (its tools are not the pack's), and the other
  way round.
- Serving calls the *live* server: the front door gets `--tool-sources` with the server as
  generation reached it (same names, prefix included), and the demo's question is a
  held-out query of the pack whose answer must come from a call to that server's tool.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

DEMO_MODEL = "toolrl-demo"


@dataclass(frozen=True)
class PackDemo:
    """The pack the demo runs on, resolved once at start-up (a bad pack fails before any
    service starts)."""

    pack: str
    """As given (a file or a shipped name); what `PipelineConfig.pack` receives."""
    name: str
    """The pack's own name (`pack:`), used for the registry name."""
    server: str
    sources_file: Path
    """Tool sources with only the pack's server: what the front door is started with."""

    @property
    def model_name(self) -> str:
        return f"{DEMO_MODEL}-{self.name}"


def prepare_pack_demo(pack: str, workdir: Path, sources: Path | None = None) -> PackDemo:
    """Load and resolve the pack, and write the sources file serving will use (the pack's
    server from `sources`, else the pack's own `source:`). Raises PackError when the pack is
    unusable or names a server the sources lack."""
    from training.data.packs.loader import load_pack, resolve_pack
    from training.data.packs.server import pack_sources

    loaded = load_pack(resolve_pack(pack))
    resolved, base_dir = pack_sources(loaded, sources)
    server = resolved.servers[loaded.spec.server].model_dump(mode="json", exclude_none=True)
    cwd = server.get("cwd")
    if cwd and not Path(cwd).is_absolute():  # the file moves; relative paths must not break
        server["cwd"] = str((base_dir / cwd).resolve())
    path = workdir / "tool_sources.yaml"
    path.write_text(yaml.safe_dump({"servers": {loaded.spec.server: server}}, sort_keys=False))
    return PackDemo(pack, loaded.spec.pack, loaded.spec.server, path)


def pack_question(dataset_dir: Path) -> tuple[str, list[str]]:
    """The question the demo asks the served model: the shortest held-out (test split)
    English single-call query of the dataset, and the tool it expects. Held out, so the answer is
    not a training row recited; single-call, so one tool call decides the check."""
    frame = pd.read_parquet(dataset_dir / "test.parquet")
    rows = frame[(frame["category"] == "single") & (frame["language"] == "en")]
    if rows.empty:
        rows = frame[frame["category"] == "single"]
    if rows.empty:
        raise ValueError(f"{dataset_dir} has no held-out single-call row to ask")
    # the shortest phrasing reads best in a demo; ties by template id (deterministic)
    row = rows.assign(_len=rows["query"].str.len()).sort_values(["_len", "template_id"]).iloc[0]
    expected = json.loads(str(row["expected_calls"]))
    return str(row["query"]), [str(call["name"]) for step in expected for call in step]


def pack_answer_check(answer: dict[str, Any], expected: list[str]) -> tuple[bool, str]:
    """Did the front door answer through a call to the third-party server's tool? The
    `toolrl` trace lists the calls the agent loop executed; one must be the expected tool
    (the server's, by its served name) and return without error. The result itself is live
    (today's time), so it is shown, not compared with the recorded one."""
    extension = answer.get("toolrl") if isinstance(answer.get("toolrl"), dict) else {}
    listed = (extension or {}).get("tool_calls")
    calls = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
    hits = [c for c in calls if c.get("name") in expected]
    if not hits:
        called = ", ".join(str(c.get("name")) for c in calls) or "no tool"
        return False, f"expected a call to {' or '.join(expected)}; the model called {called}"
    good = [c for c in hits if not c.get("is_error")]
    if not good:
        return False, f"{hits[-1].get('name')} returned a tool error: {hits[-1].get('result')!r}"
    call = good[-1]
    arguments = json.dumps(call.get("arguments"), ensure_ascii=False)
    result = str(call.get("result"))[:160]
    return True, f"answered through {call.get('name')}({arguments}) on the live server -> {result}"
