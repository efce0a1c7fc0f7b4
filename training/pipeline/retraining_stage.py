"""The retraining stages as the DAG runs them; each is idempotent for a given run key.

The DAG holds only wiring: which stage runs after which, with what connection. Everything
here is plain Python over the library, testable without Airflow. Stages take and return the
typed contracts of `training.pipeline.contracts`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from serving.settings import env_var
from training.pipeline.config import REPO_ROOT, PipelineConfig, shipped_path
from training.pipeline.contracts import (
    DatasetChoice,
    RunParams,
    StartingPoint,
    ToolMode,
    TrainingPlan,
    TrainingResult,
)

if TYPE_CHECKING:
    from serving.launch.commands import BackendConfig
    from training.spec.model import TrainingSpec

logger = logging.getLogger(__name__)

#: Episodes the candidate's evaluation keeps in flight on the project's CPU engine server, and
#: the rows that engine decodes together. A decode step of a small model on two cores is
#: mostly fixed cost, so 48 rows cost little more per step than 16
#: (`benchmarks/bench_eval_batch.py candidate`).
CPU_EVAL_BATCH = 48


class StageError(RuntimeError):
    """A stage cannot proceed; the message says why and what to do."""


def model_name() -> str:
    """The registered model's name ($TOOLRL_MODEL_NAME, else the settings' default)."""
    return os.environ.get("TOOLRL_MODEL_NAME") or str(env_var("TOOLRL_MODEL_NAME").default)


def _safe(run_key: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in run_key)


def run_workdir(config: PipelineConfig, run_key: str) -> Path:
    return Path(config.workdir) / _safe(run_key)


def latest_dataset(config: PipelineConfig) -> DatasetChoice:
    """The newest published (validated) version under data_root, for hand-triggered runs."""
    root = Path(config.data_root)
    versions = (
        sorted(
            (
                p
                for p in root.iterdir()
                if (p / "manifest.json").is_file() and (p / "validation" / "report.json").is_file()
            ),
            key=lambda p: p.stat().st_mtime,
        )
        if root.is_dir()
        else []
    )
    if not versions:
        raise StageError(f"no validated dataset under {root}: run the toolcall_dataset DAG first")
    return _choice(versions[-1])


def _choice(path: Path, superseded: tuple[str, ...] = ()) -> DatasetChoice:
    return DatasetChoice(
        dataset_version=path.name,
        dataset_dir=str(path),
        train=str(path / "train.parquet"),
        test=str(path / "test.parquet"),
        superseded=superseded,
    )


def checked_version(path: Path, expected_version: str | None = None) -> DatasetChoice:
    """A dataset version that may be trained on: its manifest, its train and test files, and a
    passing validation report are there, and (from an Asset event) its name is the version the
    event announced. Anything else is a StageError that says what is wrong."""
    report = path / "validation" / "report.json"
    if not path.is_dir():
        raise StageError(f"dataset {path} does not exist")
    for required in ("manifest.json", "train.parquet", "test.parquet"):
        if not (path / required).is_file():
            raise StageError(f"dataset {path} has no {required}: it is not a published version")
    try:
        passed = bool(json.loads(report.read_text()).get("success"))
    except (OSError, ValueError, AttributeError):
        passed = False
    if not passed:
        raise StageError(f"{path} has no passing validation report; validate it first")
    if expected_version is not None and expected_version != path.name:
        raise StageError(
            f"the Asset event names version {expected_version!r} but points to {path} "
            f"(version {path.name!r}); refusing to train on a dataset the event did not announce"
        )
    return _choice(path)


def dataset_from_events(events: list[Any]) -> DatasetChoice:
    """The version to train on from the Asset events this run consumed, oldest first.

    Airflow folds the events that arrive while a run is active (`max_active_runs=1`) into
    the next run, so one run may consume several. It trains on the newest of *its own*
    events, never on whatever is newest on disk when it starts; the older ones it consumed
    are listed as `superseded` (their data is contained in, or replaced by, the newer version).
    """
    if not events:
        raise StageError("the run was started by an Asset event, but it carries no events")
    extras = [e if isinstance(e, dict) else None for e in events]
    newest = extras[-1]
    if newest is None or not isinstance(newest.get("dataset_dir"), str):
        raise StageError(
            f"the Asset event's extra must hold a `dataset_dir` string; got {str(newest)[:300]}"
        )
    version = newest.get("dataset_version")
    if version is not None and not isinstance(version, str):
        raise StageError(f"the Asset event's `dataset_version` must be a string; got {version!r}")
    chosen = checked_version(Path(newest["dataset_dir"]), version)
    superseded = tuple(
        str(e.get("dataset_version") or e.get("dataset_dir")) for e in extras[:-1] if e is not None
    )
    return _choice(Path(chosen.dataset_dir), superseded)


def resolve_dataset(
    config: PipelineConfig, event_extras: list[Any] | None, dataset_dir: str | None
) -> DatasetChoice:
    """Which dataset a retraining run trains on: a hand-run's `dataset_dir` param first, then
    the Asset events that started the run, then (a hand run without either) the newest
    validated version under data_root."""
    if dataset_dir:
        return checked_version(Path(dataset_dir))
    if event_extras:
        return dataset_from_events(event_extras)
    return latest_dataset(config)


def starting_point(
    spec: TrainingSpec, workdir: Path, tracking_uri: str | None, model_name: str
) -> tuple[TrainingSpec, StartingPoint]:
    """Where this run starts: the spec's base model, or (with `model.start_from: champion`)
    the current champion's weights, downloaded into the run's workdir, with the shorter
    continuation SFT. Returns the spec to train and what was decided, for lineage and logs."""
    if spec.model.start_from != "champion":
        return spec, StartingPoint(start="base")
    if not tracking_uri:
        return spec, StartingPoint(start="base", why="no registry configured")
    from training.registry.registry import RegistryError, download, resolve

    try:
        info = resolve(tracking_uri, f"models:/{model_name}@champion")
    except RegistryError:
        return spec, StartingPoint(start="base", why="no champion yet")
    parent = download(tracking_uri, info, workdir / "parent_model")
    continued = spec.model_copy(
        update={
            "model": spec.model.model_copy(update={"path": str(parent)}),
            "cpu": spec.cpu.model_copy(update={"sft_steps": spec.cpu.continue_sft_steps}),
        }
    )
    start = StartingPoint(start=f"champion v{info.version}", parent_version=info.version)
    return continued, start


def plan_run(
    config: PipelineConfig,
    params: RunParams,
    event_extras: list[Any] | None,
    run_key: str,
    tracking_uri: str | None = None,
) -> TrainingPlan:
    """`plan_spec`: the dataset this run trains on (`resolve_dataset`), then its spec
    (`prepare_spec`). A StageError is a bad event or dataset: it will not get better on
    retry."""
    dataset = resolve_dataset(config, event_extras, params.dataset_dir or None)
    if dataset.superseded:
        logger.info(
            "trains on %s; superseded: %s", dataset.dataset_version, ", ".join(dataset.superseded)
        )
    return prepare_spec(config, dataset, run_key, params, tracking_uri)


def prepare_spec(
    config: PipelineConfig,
    dataset: DatasetChoice,
    run_key: str,
    params: RunParams | None = None,
    tracking_uri: str | None = None,
) -> TrainingPlan:
    """Write this run's spec (dataset, checkpoint dir and starting weights filled in),
    validate it (with verl's own validators on the verl backend), and decide the rest of the
    run: backend, thresholds, evaluation size. `params` override the config's choices."""
    from training.spec.model import load_spec

    params = params or RunParams()
    backend = params.backend or config.training_backend
    spec_path = shipped_path(params.spec) or config.training_spec
    base = replay_for_pack(load_spec(Path(spec_path)), Path(dataset.dataset_dir))
    workdir = run_workdir(config, run_key)
    spec = base.model_copy(
        update={
            "data": base.data.model_copy(
                update={
                    "train_files": [dataset.train],
                    "test_files": [dataset.test],
                    "dataset_version": dataset.dataset_version,
                }
            ),
            "checkpoint": base.checkpoint.model_copy(
                update={"run_dir": str(workdir / "checkpoints")}
            ),
            # The job runs elsewhere (a Ray worker's cwd): the recording is named absolutely.
            "tools": base.tools.model_copy(
                update={
                    key: str(Path(value).resolve())
                    for key, value in (
                        ("store", base.tools.store),
                        ("sources", base.tools.sources),
                    )
                    if value
                }
            ),
        }
    )
    thresholds = shipped_path(params.thresholds) or config.thresholds
    _check_thresholds(thresholds)
    spec, start = starting_point(spec, workdir, tracking_uri, model_name())
    warnings: list[str] = []
    if backend == "verl":
        from training.spec.plan import plan

        warnings = plan(spec, workdir / "plan").warnings
    workdir.mkdir(parents=True, exist_ok=True)
    share_with_group(workdir)
    run_spec = workdir / "spec.yaml"
    run_spec.write_text(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
    (workdir / "start.json").write_text(
        json.dumps({**start.model_dump(exclude_none=True), "base_model": base.model.path})
    )
    return TrainingPlan(
        spec_path=str(run_spec),
        workdir=str(workdir),
        spec_hash=spec.spec_hash(),
        dataset_version=dataset.dataset_version,
        dataset_superseded=dataset.superseded,
        warnings=tuple(warnings),
        base_model=base.model.path,
        starting_point=start,
        tool_mode=spec.tools.mode,
        tool_store_digest=tool_lineage(spec)["tool_store_digest"],
        backend=backend,
        thresholds=thresholds,
        eval_backend=config.eval_backend,
        eval_limit=params.eval_limit or config.eval_limit,
        dry_run=params.dry_run,
    )


def _check_thresholds(path: str) -> None:
    """Refuse a thresholds file the gate could not read now, at planning, not after an hour
    of training (a typo in the `toolrl_gate_thresholds` Variable or the `thresholds` param)."""
    from training.evaluation.gate import load_thresholds

    try:
        load_thresholds(Path(path))
    except (OSError, ValueError) as exc:
        raise StageError(f"gate thresholds {path}: {exc}") from exc


def share_with_group(path: Path) -> None:
    """Make a run directory writable by its group, new entries inheriting the group.

    On a cluster two identities write one run directory on shared storage: Airflow's tasks
    (the spec, the evaluation) and the Ray job (checkpoints, `result.json`); in the compose
    stack they are uid 50000 and uid 1000, both in group 0. Without this the job cannot
    create its checkpoint directory in a directory Airflow made (umask 022). Left as it is
    where this process does not own it (someone else shared it already)."""
    try:
        path.chmod(path.stat().st_mode | stat.S_IRWXG | stat.S_ISGID)
    except PermissionError:
        logger.info("%s: not ours to share with the group; left as it is", path)


def replay_for_pack(spec: TrainingSpec, dataset_dir: Path) -> TrainingSpec:
    """A pack dataset trains against the replay of its own call store: the built-in mock
    does not have the pack server's tools, and the user's server must not be touched by
    rollouts. A spec that already names a replay or live setup is kept as written; a
    built-in dataset keeps the spec's mode."""
    manifest_path = dataset_dir / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return spec
    generator = manifest.get("generator") if isinstance(manifest, dict) else None
    if not isinstance(generator, dict) or generator.get("kind") != "pack":
        return spec
    if spec.tools.mode in ("replay", "live"):
        return spec
    store = Path(str((manifest.get("call_store") or {}).get("path") or "calls.sqlite"))
    store = store if store.is_absolute() else dataset_dir / store
    tools = spec.tools.model_copy(update={"mode": "replay", "store": str(store.resolve())})
    return spec.model_copy(update={"tools": tools})


def tool_lineage(spec: TrainingSpec) -> dict[str, str | None]:
    """Which tools the run trains against, for the lineage tags: the mode, and in replay the
    digest of the recording (read and checked now, so a missing or corrupt store fails the
    plan, naming the file, before any GPU is booked)."""
    digest = None
    if spec.tools.mode == "replay":
        from serving.mcp_server.replay import ReplayError, load_replay

        assert spec.tools.store is not None  # the spec refuses replay without a store
        try:
            digest = load_replay(Path(spec.tools.store)).digest
        except ReplayError as exc:
            raise StageError(f"tools.store: {exc}") from exc
    return {"tool_mode": spec.tools.mode, "tool_store_digest": digest}


@contextlib.contextmanager
def planned_tools(plan: TrainingPlan, configured_url: str) -> Iterator[str]:
    """The MCP endpoint the tasks around training use (the health check, the evaluation):
    in replay, a private server over the plan's own store, started here and stopped after,
    so the evaluation scores against exactly what the rollouts saw and the user's server is
    never called; otherwise the configured server (the `toolrl_mcp` connection)."""
    if plan.tool_mode != "replay":
        yield configured_url
        return
    from serving.mcp_server.config import ServerConfig
    from serving.mcp_server.server import start
    from training.spec.model import load_spec

    store = load_spec(Path(plan.spec_path)).tools.store
    assert store is not None  # the spec refuses replay without a store
    config = ServerConfig(mode="replay", store=Path(store), port=0, workers=1)
    with start(config) as server:
        yield server.url


def check_planned_tools(configured_url: str, plan: TrainingPlan) -> str:
    """`check_mcp` against the endpoint the run's tools come from (`planned_tools`)."""
    with planned_tools(plan, configured_url) as url:
        return check_mcp(url, plan.tool_mode, plan.tool_store_digest)


def check_mcp(
    url: str, tool_mode: ToolMode | None = None, tool_store_digest: str | None = None
) -> str:
    """The MCP server must answer its health endpoint before rollouts depend on it, and, when
    the plan says which tools the run trains against (`tool_mode`, `tool_store_digest`), it
    must serve exactly those: the lineage tags would otherwise name tools the rollouts never
    called."""
    health = url.rsplit("/mcp", 1)[0] + "/healthz"
    mode = tool_mode or "mock"
    try:
        with urllib.request.urlopen(health, timeout=5) as reply:  # noqa: S310 - configured URL
            status, body = reply.status, reply.read()
    except (urllib.error.URLError, OSError) as exc:
        raise StageError(
            f"MCP server not reachable at {health}: {exc}. Start it with "
            f"`toolrl mcp serve --mode {mode}` or fix the toolrl_mcp connection"
        ) from exc
    if status != 200:
        raise StageError(f"MCP server unhealthy at {health}")
    if tool_mode:
        try:
            served = json.loads(body)
        except ValueError:
            served = {}
        if served.get("mode") != mode:
            raise StageError(
                f"the MCP server at {health} serves mode {served.get('mode')!r}, but the spec "
                f"trains against tools.mode {mode!r}: start it with `toolrl mcp serve --mode "
                f"{mode}` or change the spec"
            )
        if tool_store_digest and served.get("store_digest") != tool_store_digest:
            raise StageError(
                f"the MCP server at {health} replays a recording with digest "
                f"{served.get('store_digest')}, but the plan recorded {tool_store_digest} "
                f"(tools.store): serve the spec's store"
            )
    return health


def read_result(result_dir: str) -> TrainingResult:
    """`fetch_result`: what the finished job left in its working directory."""
    path = Path(result_dir)
    if not (path / "result.json").is_file():
        raise StageError(f"the training job left no result.json in {path}")
    return TrainingResult.read(path)


def eval_server_config(model_dir: str, backend_name: str, batch: int, port: int) -> BackendConfig:
    """The model server an evaluation starts: the project's engine server decodes `batch`
    rows together, as many as the harness keeps in flight (its default, 16, would queue the
    rest)."""
    from serving.launch.commands import BackendConfig

    return BackendConfig(
        backend=backend_name,
        model_dir=Path(model_dir),
        port=port,
        max_rows=batch if backend_name == "cpu" else None,
    )


def evaluate_model(
    model_dir: str,
    test_file: str,
    mcp_url: str,
    out: Path,
    limit: int | None = None,
    backend_name: str = "cpu",
    max_turns: int = 8,
    mcp_token: str | None = None,
    batch: int | None = None,
) -> str:
    """Serve `model_dir` on CPU (the project's engine server by default: the tool prompt
    cached, requests batched) and run the eval harness against it. `mcp_token`: the tool
    server's bearer token (deployments require one; without it every call answers 401).
    `batch`: episodes in flight, and on the engine server the rows it decodes together
    (default `CPU_EVAL_BATCH` there, 4 on the other backends)."""
    from pydantic import SecretStr

    from serving.launch.process import ModelServer
    from serving.runtime.ports import free_port
    from training.evaluation.runner import EvalConfig, evaluate

    if batch is None:
        batch = CPU_EVAL_BATCH if backend_name == "cpu" else 4
    elif batch < 1:
        raise ValueError(f"an evaluation needs at least one episode in flight, not {batch}")
    backend = eval_server_config(model_dir, backend_name, batch, free_port())
    server = ModelServer(backend, out.parent / "logs").start(timeout_s=300)
    try:
        evaluate(
            EvalConfig(
                endpoint=server.base_url,
                model=backend.request_model_name,
                data=Path(test_file),
                out=out,
                mcp_url=mcp_url,
                tokenizer=Path(model_dir),
                concurrency=batch,
                max_turns=max_turns,
                max_tokens=256,
                limit=limit,
                mcp_token=SecretStr(mcp_token) if mcp_token else None,
            ),
            progress=False,
        )
    finally:
        server.stop()
    return str(out)


def git_sha() -> str | None:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "HEAD"],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                check=True,
                timeout=10,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        return None
