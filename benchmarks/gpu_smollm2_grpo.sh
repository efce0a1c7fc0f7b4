#!/usr/bin/env bash
# verl GRPO on the pretrained SmolLM2-135M, on one GPU, through the project's own path, with
# held-out and BFCL evaluation before and after:
#   1. install the offline bundle (packages + the CPU loop's SFT checkpoint) carried in parts;
#   2. the mock MCP server with faults on (training) and one without (evaluation), a 1-GPU Ray
#      head, then `toolrl train submit` of training/specs/gpu_smollm2_grpo.yaml (30 GRPO steps
#      of 32 prompts x 8 rollouts, vLLM rollout in verl's tool_agent loop, the project's reward
#      and drift guard, marked checkpoints, merge);
#   3. `vllm serve` (hermes tool parser) of the SFT start, then of the merged result, each driven
#      by `toolrl eval` on the same held-out rows and on BFCL simple_python, multiple, irrelevance;
#   4. benchmarks/gpu_smollm2_grpo.py turns what the run left into gpu_smollm2_grpo.json.
#
# Usage (docs/parts/gpu_smoke.md has the call sequence, the sizing arithmetic and the figures):
#   benchmarks/gpu_smollm2_grpo.sh stash  # a carry call: keep this call's bundle part in /tmp
#   benchmarks/gpu_smollm2_grpo.sh run    # stash, then the pipeline in the background; waits up
#                                         # to WAIT_S (570) and copies what is done to $OUT
#   benchmarks/gpu_smollm2_grpo.sh wait   # the next call, while the machine is warm: waits on
#                                         # the same pipeline, copies its results to $OUT
# `run` and `wait` exit 0 when the run finished with both evaluations, 3 while it is still
# running (call `wait` within the machine's 30 s warm window), 1 when it failed.
# A rerun (`run` again) on a warm machine skips the installed bundle, stops what an earlier run
# left running (the process groups it recorded, and `ray stop`) and starts the job and the
# evaluations afresh; RESUME=1 keeps the job's workdir, so training continues from its last
# marked step. STEPS=N trains N steps instead of the spec's 30 (a derived spec, saved at N).
# Optional: PYTHON (python3), OUT, CARRY_DIR (.gpu_carry), JOB_TIMEOUT_S (900), BFCL_LIMIT (100
# cases per category), EVAL_CONCURRENCY (64), SERVE_TIMEOUT_S (240), WAIT_S (570).
# $OUT gets at most 8 files (what comes back): gpu_smollm2_grpo.json, stages.log, job.log,
# serve.log, eval.log, pipeline.log and, when the job failed, ray_errors.log.
set -uo pipefail

ACTION=${1:-run}
ROOT=$PWD
OUT=${OUT:-$ROOT/runs/gpu-smollm2-out}
R=/tmp/toolrl-gpu-smollm2/out # the pipeline's results; `run` and `wait` copy them to $OUT
PY=${PYTHON:-python3}
W=/tmp/toolrl-gpu-smollm2 # fixed: the spec names $W/sft_model and $W/rollouts
SITE=$W/site
STASH=$W/carry
CARRY=${CARRY_DIR:-$ROOT/.gpu_carry}
JOB_TIMEOUT_S=${JOB_TIMEOUT_S:-900}
WAIT_S=${WAIT_S:-570}
SERVE_TIMEOUT_S=${SERVE_TIMEOUT_S:-240}
BFCL_LIMIT=${BFCL_LIMIT:-100}
EVAL_CONCURRENCY=${EVAL_CONCURRENCY:-64}
SPEC=training/specs/gpu_smollm2_grpo.yaml
RUN_KEY=gpu-smollm2
RAY_API=http://127.0.0.1:8265
TRAIN_MCP=http://127.0.0.1:8000
EVAL_MCP=http://127.0.0.1:8001
mkdir -p "$OUT" "$R" "$W/pids" "$STASH"

log() { echo "[$(date +%T)] $*" | tee -a "$R/stages.log"; }
mark() { echo "$1 $(date +%s.%N)" >>"$W/stages.times"; }
# HTTP GET through Python: GPU images do not always ship an HTTP client binary.
http_ok() { "$PY" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=3)" "$1" 2>/dev/null; }
wait_http() { # URL SECONDS
  local until=$((SECONDS + $2))
  while [ $SECONDS -lt $until ]; do http_ok "$1" && return 0; sleep 1; done
  return 1
}
# Each service runs in its own session (setsid), so its whole process group (vLLM's engine
# core, uvicorn's workers) is stopped by one id, also by a rerun after this script was killed.
start_group() { # NAME LOGFILE COMMAND...
  local name=$1 logfile=$2
  shift 2
  setsid "$@" >"$logfile" 2>&1 </dev/null &
  echo $! >"$W/pids/$name.pid"
}
stop_group() { # NAME
  local file="$W/pids/$1.pid"
  [ -f "$file" ] || return 0
  local pgid
  pgid=$(cat "$file")
  kill -TERM -- "-$pgid" 2>/dev/null && sleep 2
  kill -KILL -- "-$pgid" 2>/dev/null
  rm -f "$file"
}
stop_all() { # every service an earlier or this run started, never the pipeline itself
  for file in "$W"/pids/*.pid; do
    [ -e "$file" ] && [ "$(basename "$file")" != pipeline.pid ] && stop_group "$(basename "$file" .pid)"
  done
  "$PY" -m ray.scripts.scripts stop --force >/dev/null 2>&1 || true
}

stash() { # keep this call's carried parts where the next call on this machine finds them
  [ -d "$CARRY" ] && cp -u "$CARRY"/* "$STASH"/ 2>/dev/null
  "$PY" benchmarks/gpu_carry.py status --dir "$STASH"
}

install_bundle() {
  local digest
  digest=$("$PY" benchmarks/gpu_carry.py digest --dir "$STASH") || return 1
  if [ "$(cat "$W/installed" 2>/dev/null)" = "$digest" ]; then
    log "bundle $digest already installed"
    return 0
  fi
  "$PY" benchmarks/gpu_carry.py verify --dir "$STASH" || return 1
  rm -rf "$SITE" "$W/sft_model" "$W/unpack" && mkdir -p "$W/unpack"
  # two xz streams back to back (packages, then the model folder): xz reads on into the
  # second, and tar -i reads on past the first archive's end
  "$PY" benchmarks/gpu_carry.py parts --dir "$STASH" | xargs cat | xz -d -T0 \
    | tar -x -i -C "$W/unpack" || return 1
  mv "$W/unpack/sft_model" "$W/sft_model" && mv "$W/unpack" "$SITE"
  # bytecode once, on all cores: the bundle ships none, and verl's processes (the entrypoint,
  # the trainer, three vLLM spawns) would otherwise each compile the same modules on import
  local started=$SECONDS
  "$PY" -m compileall -q -j 0 "$SITE" >/dev/null 2>&1
  log "bytecode compiled in $((SECONDS - started)) s"
  echo "$digest" >"$W/installed"
  log "bundle $digest installed: $(du -sh "$SITE" | cut -f1) of packages, model $(du -sh "$W/sft_model" | cut -f1)"
}

collect() { # copy what the pipeline has written so far to this call's $OUT
  for name in gpu_smollm2_grpo.json stages.log job.log serve.log eval.log ray_errors.log; do
    [ -f "$R/$name" ] && cp "$R/$name" "$OUT/"
  done
  [ -f "$W/pipeline.log" ] && tail -c 4000000 "$W/pipeline.log" >"$OUT/pipeline.log"
}
await_pipeline() { # wait for the background pipeline; 0 done and good, 1 failed, 3 running
  local until=$((SECONDS + WAIT_S)) pgid
  pgid=$(cat "$W/pids/pipeline.pid" 2>/dev/null)
  while [ $SECONDS -lt $until ] && [ -n "$pgid" ] && kill -0 -- "-$pgid" 2>/dev/null; do
    [ -f "$W/pipeline.rc" ] && break
    sleep 5
  done
  collect
  if [ -f "$W/pipeline.rc" ]; then
    return "$(cat "$W/pipeline.rc")"
  fi
  if [ -n "$pgid" ] && kill -0 -- "-$pgid" 2>/dev/null; then
    echo "still running: call '$0 wait' next (within the machine's warm window)"
    return 3
  fi
  echo "the pipeline ended without a result (pipeline.log)"
  return 1
}

case "$ACTION" in
stash) stash; exit $? ;;
run)
  stash
  stop_group pipeline # an earlier run's pipeline, then what it started (its first step)
  rm -f "$W/pipeline.rc" "$W/pipeline.log"
  start_group pipeline "$W/pipeline.log" bash "$0" pipeline
  await_pipeline; exit $? ;;
wait) await_pipeline; exit $? ;;
pipeline) ;;
*) echo "usage: $0 stash|run|wait" >&2; exit 2 ;;
esac

export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}" # ray, vLLM, verl: the bundle's
stop_all # whatever an earlier run on this machine left behind
rm -rf "$W/stages.times" "$R" && mkdir -p "$R"
trap 'echo $? >"$W/pipeline.rc"; stop_all' EXIT
mark start
install_bundle || { log "FAILED: bundle incomplete or corrupt (see gpu_carry.py status above)"; exit 1; }
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false
export VLLM_USE_FLASHINFER_SAMPLER=0 # the bundle leaves flashinfer out (gpu_smoke.md)
# Ray runs a job's entrypoint with `python`: make it this interpreter (a wrapper, not a link).
mkdir -p "$W/bin" && rm -f "$W/bin/python"
printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v "$PY")" >"$W/bin/python" && chmod +x "$W/bin/python"
export PATH=$W/bin:$PATH
mark install

log "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
"$PY" - <<'EOF' 2>&1 | tee -a "$R/stages.log"
import importlib.metadata as md, sys, torch
names = ["verl", "vllm", "ray", "transformers", "torch", "bfcl-eval"]
print("python", sys.version.split()[0], "cuda", torch.cuda.is_available(),
      {n: md.version(n) for n in names})
EOF
start_group gpumem "$W/gpu_mem.csv" nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500

JOB=$("$PY" -c "from training.jobs.submit import submission_id; print(submission_id('gpu-smollm2-grpo', '$RUN_KEY'))")
JW=$W/jobs/$JOB
if [ "${RESUME:-0}" != 1 ]; then rm -rf "$W/jobs" "$W/rollouts"; fi
rm -rf "$W/eval" && mkdir -p "$JW" "$W/eval"
if [ ! -f "$JW/data/test.parquet" ]; then
  log "dataset: 1,100 rows (seed 0, English): 979 train, 121 held out"
  "$PY" -m training.cli data generate --out "$JW/data" --n 1100 --test-fraction 0.12 --seed 0 \
    --chinese-fraction 0 --quiet >>"$R/stages.log" 2>&1 &
  DATA_PID=$!
fi
start_group mcp_train "$W/mcp_train.log" "$PY" -m training.cli mcp serve --mode mock --port 8000 \
  --workers 2 --seed 0 --failure-rate 0.1 --empty-rate 0.05 --latency-ms 20 --log-level warning
start_group mcp_eval "$W/mcp_eval.log" "$PY" -m training.cli mcp serve --mode mock --port 8001 \
  --workers 2 --log-level warning
"$PY" -m ray.scripts.scripts start --head --port 6390 --dashboard-host 127.0.0.1 \
  --dashboard-port 8265 --num-gpus 1 --disable-usage-stats >>"$R/stages.log" 2>&1 \
  || { log "FAILED: ray start"; exit 1; }
[ -n "${DATA_PID:-}" ] && { wait "$DATA_PID" || { log "FAILED: data generate"; exit 1; }; }
wait_http "$TRAIN_MCP/healthz" 60 && wait_http "$EVAL_MCP/healthz" 60 || { log "FAILED: MCP servers"; exit 1; }
wait_http "$RAY_API/api/version" 60 || { log "FAILED: Ray Jobs API"; exit 1; }
mark services

if [ -n "${STEPS:-}" ]; then # a shorter run: the same spec, N steps, saved at N (in the repo:
  SPEC=training/specs/gpu_smollm2_grpo_steps.yaml # `train submit` ships specs with the code)
  "$PY" - "$STEPS" "$SPEC" <<'EOF' || { log "FAILED: STEPS=$STEPS"; exit 1; }
import sys, yaml
spec = yaml.safe_load(open("training/specs/gpu_smollm2_grpo.yaml"))
steps = int(sys.argv[1])
spec["schedule"]["total_training_steps"] = steps
spec["checkpoint"]["save_freq"] = min(spec["checkpoint"]["save_freq"], steps)
spec["checkpoint"]["test_freq"] = steps
yaml.safe_dump(spec, open(sys.argv[2], "w"), sort_keys=False)
EOF
fi
log "submit $SPEC as $JOB"
"$PY" -m training.cli train submit --spec "$SPEC" --run-key "$RUN_KEY" --ray-address "$RAY_API" \
  --backend verl --workdir "$W/jobs" 2>&1 | tee -a "$R/stages.log"
STATUS=PENDING
deadline=$((SECONDS + JOB_TIMEOUT_S))
while [ $SECONDS -lt $deadline ]; do
  STATUS=$("$PY" -m training.cli train status "$JOB" --ray-address "$RAY_API" 2>/dev/null | tail -1)
  case "$STATUS" in SUCCEEDED | FAILED | STOPPED) break ;; esac
  sleep 5
done
"$PY" -m training.cli train logs "$JOB" --ray-address "$RAY_API" >"$W/job.log" 2>&1
if [ "$STATUS" != SUCCEEDED ]; then
  "$PY" -m training.cli train stop "$JOB" --ray-address "$RAY_API" >/dev/null 2>&1
  grep -l -E "Traceback|Error" /tmp/ray/session_latest/logs/*.err /tmp/ray/session_latest/logs/*.out 2>/dev/null \
    | head -20 | xargs -r tail -n 60 | head -c 4000000 >"$R/ray_errors.log"
fi
log "job $JOB: $STATUS"
"$PY" -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" \
  "$TRAIN_MCP/metrics" >"$JW/mcp_metrics.txt" 2>/dev/null
mark training
"$PY" -m ray.scripts.scripts stop --force >/dev/null 2>&1 # frees the GPU for the servers

serve() { # NAME PORT MODEL_DIR
  start_group "serve_$1" "$W/serve_$1.log" "$PY" -m vllm.entrypoints.cli.main serve "$3" \
    --served-model-name "$1" --host 127.0.0.1 --port "$2" --enable-auto-tool-choice \
    --tool-call-parser hermes --enforce-eager --gpu-memory-utilization 0.15 --max-model-len 4096
}
evaluate() { # NAME PORT MODEL_DIR: the held-out rows and BFCL side by side, one server
  local endpoint=http://127.0.0.1:$2/v1
  "$PY" -m training.cli eval --endpoint "$endpoint" --model "$1" --data "$JW/data/test.parquet" \
    --out "$W/eval/$1_heldout.json" --mcp-url "$EVAL_MCP/mcp" --tokenizer "$3" --max-turns 4 \
    --concurrency "$EVAL_CONCURRENCY" --fresh --quiet >>"$W/eval.log" 2>&1 &
  local heldout=$!
  "$PY" -m training.cli eval --endpoint "$endpoint" --model "$1" --out "$W/eval/$1_bfcl.json" \
    --bfcl simple_python,multiple,irrelevance --bfcl-root "$SITE" --limit "$BFCL_LIMIT" \
    --concurrency "$EVAL_CONCURRENCY" --quiet >>"$W/eval.log" 2>&1
  wait "$heldout"
}

MERGED=$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1])).get('merged_model_dir') or '')" \
  "$JW/result.json" 2>/dev/null)
if [ -n "$MERGED" ]; then # verl's merger writes weights and config; say what it left out
  for name in tokenizer.json tokenizer_config.json chat_template.jinja generation_config.json; do
    [ -f "$MERGED/$name" ] || { cp "$W/sft_model/$name" "$MERGED/" && log "merged dir lacked $name: copied from the SFT start"; }
  done
fi
log "serve the SFT start"
serve sft 8101 "$W/sft_model"
if wait_http http://127.0.0.1:8101/health "$SERVE_TIMEOUT_S"; then
  mark serve_sft
  # the merged model's server starts while the SFT start is evaluated (vLLM sizes its KV cache
  # from free memory; the running server's is already allocated and stays put)
  [ -n "$MERGED" ] && serve merged 8102 "$MERGED"
  evaluate sft 8101 "$W/sft_model"
  log "SFT start evaluated"
  mark eval_sft
  stop_group serve_sft
else
  log "FAILED: vllm serve of the SFT start (serve.log)"
fi
if [ -n "$MERGED" ]; then
  if wait_http http://127.0.0.1:8102/health "$SERVE_TIMEOUT_S"; then
    mark serve_merged
    evaluate merged 8102 "$MERGED"
    log "merged result evaluated"
    mark eval_merged
  else
    log "FAILED: vllm serve of the merged result (serve.log)"
  fi
else
  log "no merged model: the job did not finish (result.json)"
fi
stop_all
mark end

tail -c 15000000 "$W/job.log" >"$R/job.log"
for name in sft merged; do
  [ -f "$W/serve_$name.log" ] && { echo "== $name"; tail -n 200 "$W/serve_$name.log"; }
done >"$R/serve.log"
tail -c 4000000 "$W/eval.log" >"$R/eval.log" 2>/dev/null
"$PY" benchmarks/gpu_smollm2_grpo.py --root "$W" --job "$JOB" --status "$STATUS" \
  --out "$R/gpu_smollm2_grpo.json" | tee -a "$R/stages.log"
[ "$STATUS" = SUCCEEDED ] && [ -f "$W/eval/merged_heldout.json" ]
