"""`toolrl train plan`: the verl command line for a spec, validated without a GPU.

Validation uses verl's own machinery, so what passes here is what verl will accept:
Hydra composes verl's real `ppo_trainer` config with the overrides (an unknown key fails),
then verl's `validate_config`, the rollout/actor dataclass conversions, the advantage,
policy-loss and reward-manager registries, the tool-call parser registry, the tool-config
loader (on a tool config generated from the catalog) and the reward-function loader run.
Keys verl would compose and then ignore are refused, naming the key.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import shlex
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.model.source import is_package_reference
from training.spec.model import TrainingSpec
from training.spec.overrides import (
    IGNORED_LEGACY_PREFIXES,
    VERL_VERSION,
    build_overrides,
    override_keys,
)
from training.spec.templates import template_warnings

ENTRYPOINT = "python -m verl.trainer.main_ppo"


class PlanError(ValueError):
    """The spec cannot become a valid verl job; the message names the offending key."""


@dataclass
class Plan:
    spec_hash: str
    overrides: list[str]
    tool_config_path: str
    warnings: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)

    def command(self) -> str:
        """A copy-pasteable shell command (each override shell-quoted)."""
        return " \\\n    ".join([ENTRYPOINT, *(shlex.quote(o) for o in self.overrides)])


def write_catalog_tool_config(
    out: Path, url: str, timeout_s: float, concurrency: int, snapshot: Path | None = None
) -> Path:
    """verl's tool-config YAML for the MCP bridge, generated offline: from the dataset's
    tool snapshot (a pack dataset's `tools.json`: the tools its replay serves), else from
    the built-in catalog."""
    from training.verl_bridge.tool_config import build_tool_config, render_yaml

    if snapshot is not None:
        listed = json.loads(snapshot.read_text(encoding="utf-8"))
        tools = [
            {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t["inputSchema"],
            }
            for t in listed
        ]
        source = f"the tool snapshot {snapshot.name}"
    else:
        from serving.tools import get_catalog

        tools = [s["function"] for s in get_catalog().openai_schemas()]
        source = "the tool catalog"
    document, report = build_tool_config(tools, url, timeout_s, concurrency)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_yaml(document, report, source), encoding="utf-8")
    return out


def _refuse_ignored_keys(overrides: list[str]) -> None:
    for key in override_keys(overrides):
        if key.startswith(IGNORED_LEGACY_PREFIXES):
            raise PlanError(
                f"override '{key}' is a legacy key that verl {VERL_VERSION} composes but "
                "ignores; use reward.custom_reward_function.* / reward.reward_manager.name"
            )


def compose_verl_config(overrides: list[str]) -> Any:
    """verl's real trainer config with our overrides, composed by Hydra (no GPU needed)."""
    import verl.trainer.config as verl_config
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    config_dir = str(Path(verl_config.__file__).parent)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            return compose(config_name="ppo_trainer", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise PlanError(f"verl rejected the overrides: {_first_line(exc)}") from exc
    finally:
        GlobalHydra.instance().clear()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:400]


def _check(name: str, checks: list[str], fn: Any, *args: Any) -> Any:
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = fn(*args)
    except PlanError:
        raise
    except Exception as exc:  # verl raises assertions, ValueErrors, KeyErrors ...
        raise PlanError(f"{name} failed: {type(exc).__name__}: {_first_line(exc)}") from exc
    checks.append(name)
    return result


def validate_with_verl(config: Any, checks: list[str]) -> None:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    _check(
        "verl validate_config",
        checks,
        lambda: validate_config(config, need_reference_policy(config), need_critic(config)),
    )
    _check(
        "rollout config dataclass",
        checks,
        omega_conf_to_dataclass,
        config.actor_rollout_ref.rollout,
    )
    _check(
        "advantage estimator registry", checks, get_adv_estimator_fn, config.algorithm.adv_estimator
    )
    _check(
        "policy loss registry",
        checks,
        get_policy_loss_fn,
        config.actor_rollout_ref.actor.policy_loss.loss_mode,
    )
    _check("reward manager registry", checks, resolve_reward_manager_cls, config)
    _check(
        "tool parser registry",
        checks,
        _tool_parser_known,
        config.actor_rollout_ref.rollout.multi_turn.format,
    )
    _check(
        "tool config loader",
        checks,
        _load_tools,
        config.actor_rollout_ref.rollout.multi_turn.tool_config_path,
    )
    reward_fn = _check("reward function loader", checks, get_custom_reward_fn, config)
    _check("reward function is the project's", checks, _assert_project_reward, reward_fn)
    _check("checkpoint callback marks steps", checks, _assert_marking_callback, config)


def _tool_parser_known(name: str) -> None:
    from verl.experimental.agent_loop.tool_parser import ToolParser

    registry = getattr(ToolParser, "_registry", {})
    if name not in registry:
        raise PlanError(
            f"multi_turn.format '{name}' is not a verl tool parser ({sorted(registry)})"
        )


def _load_tools(path: str) -> None:
    from verl.tools.tool_registry import initialize_tools_from_config

    logging.getLogger("verl").setLevel(logging.WARNING)
    tools = initialize_tools_from_config(path)
    if not tools:
        raise PlanError(f"verl loaded no tools from {path}")


def _assert_marking_callback(config: Any) -> None:
    """Resume and the final-step check trust only steps with a completion marker, which
    the project's callback writes: verl's own loader must build it (or a subclass), or
    every step verl saves would be ignored."""
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback

    from training.checkpoints.callback import CheckpointUploader

    callback = build_checkpoint_callback(config)
    if not isinstance(callback, CheckpointUploader):
        raise PlanError(
            f"trainer.checkpoint_callback_class builds {type(callback).__name__}, which writes "
            "no completion markers: keep training.checkpoints.callback.CheckpointUploader "
            "or subclass it"
        )


def _assert_project_reward(reward_fn: Any) -> None:
    from training.rewards.score import compute_score

    if reward_fn is None:
        raise PlanError("verl would use its default reward: reward.custom_reward_function unset")
    probe = reward_fn(
        data_source="toolrl/synthetic",
        solution_str="",
        ground_truth='{"category": "irrelevance"}',
        extra_info={},
    )
    expected = compute_score(
        data_source="toolrl/synthetic",
        solution_str="",
        ground_truth='{"category": "irrelevance"}',
        extra_info={},
    )
    if not isinstance(probe, dict) or probe.get("score") != expected.get("score"):
        raise PlanError("the loaded reward function does not behave like the project's")


def _assert_fsdp_wraps_decoder_layers(model_dir: Path, wrap_config: Any) -> int:
    """verl shards each module its wrap policy names (by default the model class's
    `_no_split_modules`); a class name that resolves to nothing leaves the whole model one
    FSDP unit, which fits a 135M model and runs a 4B one out of memory. Checked on a
    weightless (meta-device) copy of the model, so no weights are read."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from verl.utils.fsdp_utils import get_fsdp_wrap_policy

    model_config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        module = AutoModelForCausalLM.from_config(model_config)
    policy = get_fsdp_wrap_policy(module, config=wrap_config)
    if policy is None:
        raise PlanError("fsdp_config.wrap_policy is disabled: the model would be one FSDP unit")
    wrapped = [
        type(m).__name__
        for m in module.modules()
        if m is not module and policy(module=m, recurse=False, nonwrapped_numel=0)
    ]
    layers = int(getattr(model_config, "num_hidden_layers", 0) or 0)
    if not wrapped or (layers and len(wrapped) < layers):
        raise PlanError(
            f"the FSDP wrap policy wraps {len(wrapped)} modules of {type(module).__name__} "
            f"but it has {layers} decoder layers: set actor_rollout_ref.actor.fsdp_config."
            "wrap_policy.transformer_layer_cls_to_wrap to its decoder layer class"
        )
    return len(wrapped)


def _local_model_spec(spec: TrainingSpec) -> TrainingSpec:
    """A `package://` model becomes its prepared directory (converted on first use), so
    the printed command runs as is and verl's checks see a real model."""
    if not is_package_reference(spec.model.path):
        return spec
    from training.model.prepare import prepared_dir

    local = str(prepared_dir(spec.model.path))
    return spec.model_copy(update={"model": spec.model.model_copy(update={"path": local})})


def plan(spec: TrainingSpec, workdir: Path | None = None) -> Plan:
    """Build and validate the verl overrides for `spec`; raise PlanError on any problem."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="toolrl-plan-"))
    spec_hash = spec.spec_hash()
    spec = _local_model_spec(spec)
    from training.data.packs.truth import tool_snapshot_path

    tool_config = write_catalog_tool_config(
        workdir / "tool_config.yaml",
        spec.tools.server_url,
        spec.tools.timeout_s,
        spec.tools.max_concurrency,
        tool_snapshot_path(Path(spec.data.train_files[0])),
    )
    overrides = build_overrides(spec, str(tool_config))
    _refuse_ignored_keys(overrides)
    checks: list[str] = []
    config = compose_verl_config(overrides)
    checks.append("hydra compose of verl's ppo_trainer")
    validate_with_verl(config, checks)
    model_dir = Path(spec.model.path)
    if (model_dir / "config.json").is_file():
        _check(
            "FSDP wrap policy covers every decoder layer",
            checks,
            _assert_fsdp_wraps_decoder_layers,
            model_dir,
            config.actor_rollout_ref.actor.fsdp_config.wrap_policy,
        )
    return Plan(spec_hash, overrides, str(tool_config), template_warnings(spec), checks)
