#!/usr/bin/env bash
# tern against llama.cpp on the CPU, llama-bench's way: pp512 and tg128 at 2
# threads, 3 runs each, on the same random full-size ERNIE-4.5-0.3B weights.
# One command does it all, each step cached: build llama.cpp (build_llama_cpp.sh),
# convert the HF folder to a BF16 GGUF with llama.cpp's own convert_hf_to_gguf.py
# (in a venv of its own with torch), quantize to Q8_0 / Q4_0 / Q4_K_M, measure the
# machine's read bandwidth, then PASSES passes that alternate `llama-bench` on every
# GGUF with `tern bench pp-tg` on the same file and on the HF folder (bf16), plus one
# tern run with the reference kernels. JSON per run and a markdown table (cpu_report.py) go to OUT_DIR.
#
#   bench/serving/baselines/llama_cpp_cpu_bench.sh [OUT_DIR]     (make bench-cpu)
#
# Env: LLAMA_DIR (build_llama_cpp.sh's), TERN_BIN (build/bin/tern), BW_BIN
# (build/bin/tern_cpu_linear_bench), MODEL (models/ernie-4.5-0.3b-random), GGUF_DIR
# (models/gguf), THREADS (2), PP (512), TG (128), REPS (3), PASSES (2), QUANTS
# ("Q8_0 Q4_0 Q4_K_M"), OPTIMIZED_FILES (BF16: the files tern also runs with --cpu-kernels optimized,
# fp32 activations, beside the default fast set's bf16 ones), REFERENCE (1: the reference-kernel run, REF_REPS 1 run),
# PYTHON (.venv/bin/python, for the report and client), SERVE (0; 1 adds llama-server -np 8
# against tern serve through serve_bench.py at 1, 4 and 8 streams: SERVE_SCENARIOS, SERVE_BUDGET,
# SERVE_PASSES; SERVE_KERNELS: the --cpu-kernels sets tern serves the bf16 HF folder with, default
# "optimized fast"; SERVE_QUANTS: the GGUF files both serve as well, default "Q4_K_M"; the
# serving table goes to OUT_DIR/cpu-serve.md).
set -euo pipefail
cd "$(dirname "$0")/../../.."

OUT=${1:-bench/results/cpu-llama}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
TERN_BIN=${TERN_BIN:-build/bin/tern}
BW_BIN=${BW_BIN:-build/bin/tern_cpu_linear_bench}
MODEL=${MODEL:-models/ernie-4.5-0.3b-random}
GGUF_DIR=${GGUF_DIR:-models/gguf}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-3}
PASSES=${PASSES:-2}
QUANTS=${QUANTS:-Q8_0 Q4_0 Q4_K_M}
OPTIMIZED_FILES=${OPTIMIZED_FILES:-BF16}
PY=${PYTHON:-.venv/bin/python}
START=$(date +%s)
exec > >(tee -a "$OUT/run.log") 2>&1
note() {  # also keeps the load average at each step, for the report (load.txt)
  echo "[llama_cpp_cpu_bench +$(($(date +%s) - START))s] $*"
  [ -d "$OUT" ] && cut -d' ' -f1 /proc/loadavg >> "$OUT/load.txt" 2>/dev/null || true
}

[ -x "$TERN_BIN" ] || { note "no tern binary at $TERN_BIN (set TERN_BIN)"; exit 1; }
[ -s "$MODEL/model.safetensors" ] || { note "no $MODEL/model.safetensors (make random-model)"; exit 1; }

# 1. llama.cpp (cached).
tools="llama-bench llama-quantize"
[ "${SERVE:-0}" = 1 ] && tools="$tools llama-server"
eval "$(LLAMA_TOOLS=$tools bench/serving/baselines/build_llama_cpp.sh | tail -n 2)"  # sets src= and bin=
LLAMA_DIR=${LLAMA_DIR:-$HOME/.cache/tern/llama.cpp}

# 2. The converter's own environment (llama_cpp_convert_env.sh, cached).
eval "$(bench/serving/baselines/llama_cpp_convert_env.sh | tail -n 1)"  # sets python=
CONVERT_PYTHON=$python

# 3. GGUF files (cached; redone when the checkpoint is newer).
mkdir -p "$GGUF_DIR"
name=$(basename "$MODEL")
bf16="$GGUF_DIR/$name-BF16.gguf"
if [ ! -s "$bf16" ] || [ "$MODEL/model.safetensors" -nt "$bf16" ]; then
  note "converting $MODEL to $bf16"
  "$CONVERT_PYTHON" "$src/convert_hf_to_gguf.py" "$MODEL" --outtype bf16 --outfile "$bf16.tmp" \
    > "$OUT/convert.log" 2>&1 || { tail -n 20 "$OUT/convert.log"; exit 1; }
  mv "$bf16.tmp" "$bf16"
fi
ggufs=("$bf16")
for q in $QUANTS; do
  f="$GGUF_DIR/$name-$q.gguf"
  if [ ! -s "$f" ] || [ "$bf16" -nt "$f" ]; then
    note "quantizing to $q"
    "$bin/llama-quantize" "$bf16" "$f.tmp" "$q" "$THREADS" > "$OUT/quantize-$q.log" 2>&1 \
      || { tail -n 20 "$OUT/quantize-$q.log"; exit 1; }
    mv "$f.tmp" "$f"
  fi
  ggufs+=("$f")
done

# 4. The machine: CPU, memory, read bandwidth (best of 5 sums over 1 GiB; measured again after the passes).
{ lscpu; free -g; } > "$OUT/machine.txt" 2>&1 || true
if [ -x "$BW_BIN" ]; then
  "$BW_BIN" --bandwidth-only --threads "1,$THREADS" | tee "$OUT/bandwidth.txt"
else
  note "no $BW_BIN: no bandwidth figure (cmake --build build --target tern_cpu_linear_bench)"
fi
git rev-parse --short=12 HEAD > "$OUT/commit.txt" 2>/dev/null || echo unknown > "$OUT/commit.txt"
date -u +%Y-%m-%dT%H:%MZ > "$OUT/date.txt"
rm -f "$OUT"/llama-*.json "$OUT"/tern-*.json "$OUT"/load.txt

# 5. Alternating passes, PASSES times: tern on the HF folder, then on each GGUF file
#    tern and llama-bench one after the other (like with like, same file).
tern_run() {  # kernels label
  note "tern bench pp-tg ($1 kernels) -> $2.json"
  "$TERN_BIN" bench pp-tg --model "$MODEL" --device cpu -t "$THREADS" -p "$PP" -n "$TG" -r "${3:-$REPS}" \
    --cpu-kernels "$1" --json-out "$OUT/$2.json"
}
for pass in $(seq 1 "$PASSES"); do
  tern_run optimized "tern-optimized-pass$pass"
  for f in "${ggufs[@]}"; do
    q=$(basename "$f" .gguf); q=${q#"$name-"}
    note "tern bench pp-tg on $q (pass $pass)"
    "$TERN_BIN" bench pp-tg --model "$f" --device cpu -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" \
      --cpu-kernels fast --json-out "$OUT/tern-$q-pass$pass.json"
    if [[ " $OPTIMIZED_FILES " == *" $q "* ]]; then
      note "tern bench pp-tg --cpu-kernels optimized on $q (pass $pass)"
      "$TERN_BIN" bench pp-tg --model "$f" --device cpu -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" \
        --cpu-kernels optimized --json-out "$OUT/tern-$q-optimized-pass$pass.json"
    fi
    note "llama-bench $q (pass $pass)"
    "$bin/llama-bench" -m "$f" -p "$PP" -n "$TG" -t "$THREADS" -r "$REPS" -o json \
      > "$OUT/llama-$q-pass$pass.json" 2> "$OUT/llama-$q-pass$pass.log" || { tail -n 5 "$OUT/llama-$q-pass$pass.log"; exit 1; }
  done
done
if [ "${REFERENCE:-1}" = 1 ]; then
  tern_run reference tern-reference "${REF_REPS:-1}"
fi
# The bandwidth again: the host's load moves it by a third within minutes; the report takes the higher.
[ -x "$BW_BIN" ] && "$BW_BIN" --bandwidth-only --threads "1,$THREADS" | tee -a "$OUT/bandwidth.txt"

# 6. The table.
"$PY" bench/serving/baselines/cpu_report.py "$OUT" | tee "$OUT/cpu-llama.md"

# 7. SERVE=1: llama-server (8 slots) against tern serve through the same client
#    (serve_bench.py), closed loops of 1, 4 and 8 streams (SERVE_SCENARIOS, SERVE_BUDGET s each server):
#    on BF16, tern on the HF folder with each SERVE_KERNELS set against llama-server on the BF16 GGUF;
#    on each of SERVE_QUANTS (default Q4_K_M, the type most CPU deployments run), both on the same file.
#    SERVE_PASSES (1) passes, the order of the servers reversed in every other one.
if [ "${SERVE:-0}" = 1 ]; then
  stop_leftovers() {  # a server left by a killed serve_bench, by the pid it wrote
    local pidf
    for pidf in "$OUT"/*-server.pid; do [ -f "$pidf" ] && kill "$(cat "$pidf")" 2>/dev/null; rm -f "$pidf"; done
  }
  trap stop_leftovers EXIT
  scen=${SERVE_SCENARIOS:-conc-1:4,conc-4:8,conc-8:16}
  budget=${SERVE_BUDGET:-300}
  export TERN_COMMIT=$(cat "$OUT/commit.txt")
  rm -f "$OUT"/serve-*.json "$OUT"/serve-*.md
  serve() {  # label launch-command [launch-timeout]
    note "serve_bench $1: $scen"
    "$PY" bench/serving/serve_bench.py --label "$1" --out-dir "$OUT" --model-dir "$MODEL" --launch "$2" \
      --launch-timeout "${3:-60}" --scenarios "$scen" --time-budget "$budget" || note "serve_bench $1: rc $?"
    stop_leftovers
  }
  tern_serve() {  # pass file kernels
    local q=BF16 model=$MODEL
    [ "$2" = "$bf16" ] || { q=$(basename "$2" .gguf); q=${q#"$name-"}; model=$2; }
    serve "serve-$q-tern-$3-pass$1" \
      "$TERN_BIN serve --model $model --device cpu --threads $THREADS --cpu-kernels $3 --host 127.0.0.1 --port 0"
  }
  llama_serve() {  # pass file
    local q; q=$(basename "$2" .gguf); q=${q#"$name-"}
    serve "serve-$q-llama.cpp-pass$1" \
      "$bin/llama-server -m $2 -np 8 -t $THREADS -c 8192 --host 127.0.0.1 --port 0 --no-webui" 120
  }
  for pass in $(seq 1 "${SERVE_PASSES:-1}"); do
    for f in "$bf16" ${SERVE_QUANTS-Q4_K_M}; do
      [ "$f" = "$bf16" ] || f="$GGUF_DIR/$name-$f.gguf"
      [ -s "$f" ] || { note "no $f (add its type to QUANTS): not served"; continue; }
      kernel_sets=fast
      [ "$f" = "$bf16" ] && kernel_sets=${SERVE_KERNELS:-optimized fast}
      if [ $((pass % 2)) = 1 ]; then
        for k in $kernel_sets; do tern_serve "$pass" "$f" "$k"; done
        llama_serve "$pass" "$f"
      else
        llama_serve "$pass" "$f"
        for k in $kernel_sets; do tern_serve "$pass" "$f" "$k"; done
      fi
    done
  done
  "$PY" bench/serving/baselines/cpu_serve_report.py "$OUT" | tee "$OUT/cpu-serve.md"
fi
[ "${SERVE:-0}" = 1 ] && note "serving table: $OUT/cpu-serve.md"
note "done: $OUT/cpu-llama.md"
