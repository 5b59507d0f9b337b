#!/usr/bin/env bash
# tern against plain HF transformers on the GPU machine: same random
# ERNIE-4.5-0.3B checkpoint, same client (bench/serving/serve_bench.py), same run.
# Builds nothing: $TERN_BIN must exist. Writes JSON, markdown, plots and logs
# to OUT_DIR; takes under 8 minutes (each server run is capped by a budget).
#
#   bench/serving/run_gpu_bench.sh OUT_DIR
#
# Env: TERN_BIN (build/bin/tern), PYTHON (python3), TERN_COMMIT (else git),
# BENCH_MODEL (/tmp/ernie-4.5-0.3b-random), SCENARIOS, HF_SCENARIOS (the
# same scenarios with fewer requests, so plain HF, ~30 tok/s per stream,
# reaches every one inside its budget), TERN_BUDGET (120 s), HF_BUDGET (170 s), HF_STATIC=1 adds a static-cache + torch.compile HF run
# (HF_STATIC_BUDGET, 90 s; compiles count in its cold start); TERN_DEVICE
# (cuda), TERN_ARGS and HF_ARGS (extra server flags; HF_ARGS="--backend fake"
# and TERN_DEVICE=cpu make a CPU dry run of this script), HF=0 (tern alone:
# a quick look, not a comparison), ENGINE_CONC (256: the engine-only closed
# loop, `tern bench conc --concurrency N`; 0 skips it). LLAMA_CPP_BIN (a folder with llama.cpp's
# CUDA llama-server and llama-bench, built from the llama-cpp-python source
# package) and LLAMA_CPP_CONVERT (its convert_hf_to_gguf.py) add llama.cpp
# on the same weights converted to a bf16 GGUF: llama-bench (pp256, tg128;
# when the folder has it) and llama-server through the same client (LLAMA_SCENARIOS, LLAMA_BUDGET
# 120 s, LLAMA_SERVER_ARGS: its flags, "-ngl 99 -fa on -np 256 -c 524288"). REPORT_SECTION and REPORT_TITLE name the benchmarks.md section
# written (gpu, "GPU: one NVIDIA H200").
set -uo pipefail
cd "$(dirname "$0")/../.."

OUT=${1:?usage: bench/serving/run_gpu_bench.sh OUT_DIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
TERN_BIN=${TERN_BIN:-build/bin/tern}
PY=${PYTHON:-python3}
MODEL=${BENCH_MODEL:-/tmp/ernie-4.5-0.3b-random}
SCENARIOS=${SCENARIOS:-single,single+sampled,conc-1,conc-8,conc-64,conc-64+sampled,conc-256,conc-256+sampled,offline}
HF_SCENARIOS=${HF_SCENARIOS:-single:4,conc-1:8,conc-8:16,conc-64:64,conc-256:256,offline:16}
TERN_BUDGET=${TERN_BUDGET:-120}
HF_BUDGET=${HF_BUDGET:-170}
TERN_DEVICE=${TERN_DEVICE:-cuda}
TERN_ARGS=${TERN_ARGS:-}
HF_ARGS=${HF_ARGS:-}
START=$(date +%s)
exec > >(tee -a "$OUT/run.log") 2>&1
note() { echo "[run_gpu_bench +$(($(date +%s) - START))s] $*"; }

# A server left behind by a killed serve_bench is stopped by the pid it wrote.
cleanup() {
  for f in "$OUT"/*-server.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null && note "stopped leftover server $pid ($f)"
    rm -f "$f"
  done
}
trap cleanup EXIT

if [ -z "${TERN_COMMIT:-}" ]; then
  TERN_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
fi
export TERN_COMMIT

[ -x "$TERN_BIN" ] || { note "no tern binary at $TERN_BIN (set TERN_BIN)"; exit 1; }
note "commit $TERN_COMMIT, $("$TERN_BIN" --version 2>&1)"
{ nvidia-smi || true; } > "$OUT/nvidia-smi.txt" 2>&1
$PY - <<'EOF' > "$OUT/versions.txt" 2>&1
import importlib, sys
print("python", sys.version.split()[0])
for m in ("torch", "transformers", "aiohttp", "httpx", "uvloop", "numpy", "matplotlib"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "missing:", type(e).__name__)
EOF
cat "$OUT/versions.txt"

# 1. The model: full-size random weights, tokenizer padded to the vocabulary
#    (bench/serving/sp_vocab.py says why), made once per machine.
if [ ! -s "$MODEL/model.safetensors" ]; then
  note "making $MODEL"
  $PY tools/make_random_model.py --out "$MODEL" --tokenizer-from tests/data/ernie-tiny || exit 1
fi
$PY bench/serving/sp_vocab.py pad "$MODEL" || exit 1

# 2. tern, engine only (no HTTP): 256 requests, in/out 100-1024; and conc-256's workload as a closed loop of
#    256 sequences, the engine's share of the conc-256 figure through HTTP.
ENGINE_CMD="$TERN_BIN bench offline --model $MODEL --device $TERN_DEVICE --json-out $OUT/tern-engine-offline.json"
ENGINE_CONC=${ENGINE_CONC:-256}
CONC_CMD="$TERN_BIN bench conc --concurrency $ENGINE_CONC --model $MODEL --device $TERN_DEVICE --json-out $OUT/tern-engine-conc.json"
note "$ENGINE_CMD"
timeout -k 5 60 $ENGINE_CMD > "$OUT/tern-engine-offline.log" 2>&1 || note "tern bench offline failed (rc $?)"
tail -n 5 "$OUT/tern-engine-offline.log"
if [ "$ENGINE_CONC" != 0 ]; then
  note "$CONC_CMD"
  timeout -k 5 60 $CONC_CMD > "$OUT/tern-engine-conc.log" 2>&1 || note "tern bench conc failed (rc $?)"
  tail -n 5 "$OUT/tern-engine-conc.log"
fi

# 3. tern serve, then 4. plain HF, through the same client and scenarios.
note "tern serve: $SCENARIOS (budget ${TERN_BUDGET}s)"
timeout -k 10 $((TERN_BUDGET + 90)) $PY bench/serving/serve_bench.py --label tern --out-dir "$OUT" --model-dir "$MODEL" \
  --launch "$TERN_BIN serve --model $MODEL --device $TERN_DEVICE --host 127.0.0.1 --port 0 $TERN_ARGS" \
  --launch-timeout 60 \
  --scenarios "$SCENARIOS" --time-budget "$TERN_BUDGET" || note "serve_bench tern: rc $?"
cleanup

if [ "${HF:-1}" != 0 ]; then
  note "HF transformers: $HF_SCENARIOS (budget ${HF_BUDGET}s)"
  timeout -k 10 $((HF_BUDGET + 150)) $PY bench/serving/serve_bench.py --label hf --out-dir "$OUT" --model-dir "$MODEL" \
    --launch "$PY bench/serving/baselines/hf_server.py --model $MODEL --host 127.0.0.1 --port 0 $HF_ARGS" \
    --launch-timeout 120 \
    --scenarios "$HF_SCENARIOS" --time-budget "$HF_BUDGET" || note "serve_bench hf: rc $?"
  cleanup
fi

if [ -n "${LLAMA_CPP_BIN:-}" ]; then
  GGUF="$MODEL/model-bf16.gguf"
  if [ ! -s "$GGUF" ] && [ -n "${LLAMA_CPP_CONVERT:-}" ]; then
    note "converting $MODEL to $GGUF"
    PYTHONPATH="$(dirname "$LLAMA_CPP_CONVERT")/gguf-py:${PYTHONPATH:-}" $PY "$LLAMA_CPP_CONVERT" "$MODEL" \
      --outtype bf16 --outfile "$GGUF" > "$OUT/llama-convert.log" 2>&1 || { note "conversion failed"; tail -5 "$OUT/llama-convert.log"; }
  fi
  if [ -s "$GGUF" ]; then
    if [ -x "$LLAMA_CPP_BIN/llama-bench" ]; then
      note "llama-bench: pp256, tg128 on $GGUF"
      timeout -k 5 120 "$LLAMA_CPP_BIN/llama-bench" -m "$GGUF" -ngl 99 -fa on -p 256 -n 128 -r 5 -o md \
        > "$OUT/llama-bench.md" 2> "$OUT/llama-bench.log" || note "llama-bench: rc $?"
      cat "$OUT/llama-bench.md"
    fi
    note "llama.cpp server: ${LLAMA_SCENARIOS:-$SCENARIOS} (budget ${LLAMA_BUDGET:-120}s)"
    # By default 256 slots of 2,048 tokens: every scenario's requests fit their slot.
    timeout -k 10 $((${LLAMA_BUDGET:-120} + 120)) $PY bench/serving/serve_bench.py --label llama.cpp --out-dir "$OUT" \
      --model-dir "$MODEL" --launch "$LLAMA_CPP_BIN/llama-server -m $GGUF ${LLAMA_SERVER_ARGS:--ngl 99 -fa on -np 256 -c 524288} \
      --host 127.0.0.1 --port 0 --no-webui" --launch-timeout 120 \
      --scenarios "${LLAMA_SCENARIOS:-$SCENARIOS}" --time-budget "${LLAMA_BUDGET:-120}" || note "serve_bench llama.cpp: rc $?"
    cleanup
  fi
fi

RUNS=("$OUT/tern.json" "$OUT/hf.json")
[ -f "$OUT/llama.cpp.json" ] && RUNS+=("$OUT/llama.cpp.json")
if [ "${HF_STATIC:-0}" = 1 ]; then
  note "HF static cache + torch.compile"
  timeout -k 10 $((${HF_STATIC_BUDGET:-90} + 300)) $PY bench/serving/serve_bench.py --label hf-static --out-dir "$OUT" \
    --model-dir "$MODEL" --launch "$PY bench/serving/baselines/hf_server.py --model $MODEL --host 127.0.0.1 --port 0 \
    --static-cache-compile --warmup-shapes 1x512,64x1024" --launch-timeout 300 \
    --scenarios single,conc-1,conc-64 --time-budget "${HF_STATIC_BUDGET:-90}" || note "serve_bench hf-static: rc $?"
  cleanup
  RUNS+=("$OUT/hf-static.json")
fi

# 5. Report: docs/benchmarks.md's GPU section and plots, written into OUT_DIR
#    (copy benchmarks.md and the PNGs into docs/ to publish).
[ -f docs/benchmarks.md ] && cp docs/benchmarks.md "$OUT/benchmarks.md"
EXISTING=()
for f in "${RUNS[@]}"; do [ -f "$f" ] && EXISTING+=("$f"); done
ENGINE_ARGS=()
ENGINE_CMDS=()
[ -f "$OUT/tern-engine-offline.json" ] && ENGINE_ARGS+=(--engine "$OUT/tern-engine-offline.json") && ENGINE_CMDS+=("$ENGINE_CMD")
[ -f "$OUT/tern-engine-conc.json" ] && ENGINE_ARGS+=(--engine "$OUT/tern-engine-conc.json") && ENGINE_CMDS+=("$CONC_CMD")
if [ ${#ENGINE_CMDS[@]} -gt 0 ]; then
  joined=$(printf '%s; ' "${ENGINE_CMDS[@]}")
  ENGINE_ARGS+=(--engine-command "${joined%; }")
fi
$PY bench/serving/report.py "${EXISTING[@]}" "${ENGINE_ARGS[@]}" --section "${REPORT_SECTION:-gpu}" \
  --title "${REPORT_TITLE:-GPU: one NVIDIA H200}" \
  --md "$OUT/benchmarks.md" --plots-dir "$OUT" || note "report failed"
note "done; files in $OUT"
ls -la "$OUT"
