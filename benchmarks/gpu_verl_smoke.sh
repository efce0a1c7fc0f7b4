#!/usr/bin/env bash
# Two real verl GRPO steps on one GPU through the project's own path: the TrainingSpec
# (training/specs/gpu_tiny_smoke.yaml) submitted with `toolrl train submit` to a local Ray head,
# vLLM rollout in verl's tool agent loop, every tool call sent over MCP to the project's mock-mode
# server, scored by the project's reward, checkpointed, resumed-from layout, merged to HF.
#
# Usage (on a GPU machine with verl, vLLM and Ray importable):
#   OUT=/tmp/smoke-out benchmarks/gpu_verl_smoke.sh
# Optional: PYTHON (default python3), SITE (a package directory put first on PYTHONPATH),
# WARM_MODEL (an SFT-warm-started tiny model directory; without it the tiny model is built
# untrained and rarely emits a tool call), WORKDIR, JOB_TIMEOUT_S (default 420).
# Writes $OUT/gpu_verl_smoke.json (figures), $OUT/stages.log, $OUT/job.log, $OUT/mcp.log, and
# $OUT/ray_errors.log when the job failed.
set -uo pipefail

OUT=${OUT:-$PWD/runs/gpu-smoke-out}
PY=${PYTHON:-python3}
W=${WORKDIR:-/tmp/toolrl-gpu-smoke}
JOB_TIMEOUT_S=${JOB_TIMEOUT_S:-420}
RAY_API=http://127.0.0.1:8265
SPEC=training/specs/gpu_tiny_smoke.yaml
RUN_KEY=gpu-smoke
mkdir -p "$OUT" "$W"

log() { echo "[$(date +%T)] $*" | tee -a "$OUT/stages.log"; }
# HTTP GET through Python: GPU images do not always ship an HTTP client binary.
http_get() { "$PY" -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" "$1" 2>/dev/null; }
mark() { echo "$1 $(date +%s.%N)" >>"$OUT/stages.times"; }

export PYTHONPATH="${SITE:+$SITE:}$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false
# The spec passes this to verl's workers; the Ray head gets it too, so that every vLLM process
# sees it however verl starts them (vLLM 0.24 otherwise imports flashinfer for its sampler).
export VLLM_USE_FLASHINFER_SAMPLER=0
# Ray runs a job's entrypoint with `python`: make it the interpreter this script uses (a
# wrapper, not a symlink: a venv's interpreter reached through a link loses its venv).
mkdir -p /tmp/toolrl-bin && rm -f /tmp/toolrl-bin/python  # never write through an old link
printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v "$PY")" >/tmp/toolrl-bin/python
chmod +x /tmp/toolrl-bin/python
export PATH=/tmp/toolrl-bin:$PATH

cleanup() {
  "$PY" -m ray.scripts.scripts stop --force >/dev/null 2>&1 || true
  [ -n "${MCP_PID:-}" ] && kill "$MCP_PID" 2>/dev/null || true
}
trap cleanup EXIT

mark start
log "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
"$PY" - <<'EOF' 2>&1 | tee -a "$OUT/stages.log"
import importlib.metadata as md, sys, torch
names = ["verl", "vllm", "ray", "transformers", "torch"]
print("python", sys.version.split()[0], "cuda", torch.cuda.is_available(),
      {n: md.version(n) for n in names})
EOF

# `train submit` runs the job in <workdir>/<submission id>: the data and the warm start go there.
JOB=$("$PY" -c "from training.jobs.submit import submission_id; print(submission_id('gpu-tiny-smoke', '$RUN_KEY'))")
JW="$W/$JOB"
mkdir -p "$JW"
log "dataset: 200 rows (seed 0) in $JW/data"
"$PY" -m training.cli data generate --out "$JW/data" --n 200 --seed 0 --quiet >>"$OUT/stages.log" 2>&1 \
  || { log "FAILED: data generate"; exit 1; }
if [ -n "${WARM_MODEL:-}" ]; then
  rm -rf "$JW/base_model" && cp -r "$WARM_MODEL" "$JW/base_model"
  log "warm start: $WARM_MODEL -> $JW/base_model"
fi
mark data

log "MCP server (mock mode) on 127.0.0.1:8000"
"$PY" -m training.cli mcp serve --mode mock --port 8000 --workers 1 --log-level warning \
  >"$OUT/mcp.log" 2>&1 &
MCP_PID=$!
for _ in $(seq 60); do
  http_get http://127.0.0.1:8000/healthz >/dev/null && break
  sleep 0.5
done
http_get http://127.0.0.1:8000/healthz >/dev/null || { log "FAILED: MCP server"; exit 1; }
mark mcp

log "Ray head (1 GPU)"
"$PY" -m ray.scripts.scripts start --head --port 6390 --dashboard-host 127.0.0.1 \
  --dashboard-port 8265 --num-gpus 1 --disable-usage-stats >>"$OUT/stages.log" 2>&1 \
  || { log "FAILED: ray start"; exit 1; }
for _ in $(seq 60); do
  http_get "$RAY_API/api/version" >/dev/null && break
  sleep 1
done
mark ray

log "submit $SPEC"
"$PY" -m training.cli train plan --spec "$SPEC" >"$OUT/plan.txt" 2>&1 || { log "FAILED: plan"; cat "$OUT/plan.txt"; exit 1; }
"$PY" -m training.cli train submit --spec "$SPEC" --run-key "$RUN_KEY" --ray-address "$RAY_API" \
  --backend verl --workdir "$W" 2>&1 | tee -a "$OUT/stages.log"
mark submitted

STATUS=PENDING
deadline=$((SECONDS + JOB_TIMEOUT_S))
while [ $SECONDS -lt $deadline ]; do
  STATUS=$("$PY" -m training.cli train status "$JOB" --ray-address "$RAY_API" 2>/dev/null | tail -1)
  case "$STATUS" in SUCCEEDED | FAILED | STOPPED) break ;; esac
  sleep 5
done
mark job_end
log "job $JOB: $STATUS"
"$PY" -m training.cli train logs "$JOB" --ray-address "$RAY_API" >"$OUT/job.log" 2>&1
if [ "$STATUS" != SUCCEEDED ]; then
  "$PY" -m training.cli train stop "$JOB" --ray-address "$RAY_API" >/dev/null 2>&1
  # the worker-side tracebacks, which the driver log only summarises
  grep -l -E "Traceback|Error" /tmp/ray/session_latest/logs/*.err /tmp/ray/session_latest/logs/*.out 2>/dev/null \
    | head -20 | xargs -r tail -n 60 | head -c 4000000 >"$OUT/ray_errors.log"
fi
http_get http://127.0.0.1:8000/metrics >"$JW/mcp_metrics.txt" || true

"$PY" benchmarks/gpu_verl_smoke.py --workdir "$JW" --out-dir "$OUT" --status "$STATUS" \
  | tee -a "$OUT/stages.log"
[ "$STATUS" = SUCCEEDED ]
