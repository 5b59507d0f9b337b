#!/usr/bin/env bash
# The GPU targets (issue table in docs/benchmarks.md, "GPU round 2: the targets from
# one run") in one run: tern alone through HTTP on the full-size random model,
# bf16 greedy and sampled scenarios (bench/serving/run_gpu_bench.sh with HF=0),
# then the same server with --kv-cache-dtype fp8, --quantization fp8, both
# together and --quantization q4_0 (int4 weights). Writes
# OUT_DIR/{bf16,kvfp8,fp8w,fp8both,int4}/
# (each run_gpu_bench.sh's files) and their logs; about 2 minutes on an H200.
#
#   TERN_BIN=build/bin/tern bench/serving/run_gpu_targets.sh OUT_DIR
#
# Env: TERN_BIN, BENCH_MODEL (/tmp/ernie-4.5-0.3b-random), TERN_BUDGET (60 s
# for the bf16 scenarios), VARIANT_BUDGET (45 s each), TERN_COMMIT, TARGETS_ARGS
# (flags added to every server's, e.g. "--gemm-k-split-tokens 0"), VARIANTS
# (the variants' names to run after bf16, default all: kvfp8 fp8w fp8both int4; "none" runs bf16 alone),
# BF16_SCENARIOS (the bf16 server's, default single,single+sampled,conc-8,conc-64,conc-64+sampled,conc-256,
# conc-256+sampled).
set -u
cd "$(dirname "$0")/../.."
OUT=${1:?usage: bench/serving/run_gpu_targets.sh OUT_DIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export HF=0 BENCH_MODEL=${BENCH_MODEL:-/tmp/ernie-4.5-0.3b-random} TERN_BUDGET=${TERN_BUDGET:-60}
# --log-level debug: tern's per-request steady-clock lines, so each scenario's client TTFT is split
# (serve_bench's client_ttft_split_ms and the line under its table).
bf16_scenarios=single,single+sampled,conc-8,conc-64,conc-64+sampled,conc-256,conc-256+sampled
TERN_ARGS="--log-level debug ${TARGETS_ARGS:-}" SCENARIOS=${BF16_SCENARIOS:-$bf16_scenarios} \
  bash bench/serving/run_gpu_bench.sh "$OUT/bf16" > "$OUT/bf16.log" 2>&1
grep -E "^\| tern \| " "$OUT/bf16/tern.md"
for v in "kvfp8:--kv-cache-dtype fp8" "fp8w:--quantization fp8" "fp8both:--quantization fp8 --kv-cache-dtype fp8" \
  "int4:--quantization q4_0"; do
  name=${v%%:*} args=${v#*:}
  case " ${VARIANTS:-kvfp8 fp8w fp8both int4} " in *" $name "*) ;; *) continue ;; esac
  ENGINE_CONC=0 TERN_ARGS="$args --log-level debug ${TARGETS_ARGS:-}" SCENARIOS=single,conc-64,conc-256 TERN_BUDGET=${VARIANT_BUDGET:-45} \
    bash bench/serving/run_gpu_bench.sh "$OUT/$name" > "$OUT/$name.log" 2>&1
  echo "== $name ($args)"
  grep -E "^\| tern \| " "$OUT/$name/tern.md"
done
