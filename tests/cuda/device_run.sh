#!/usr/bin/env bash
# Runs the GPU tests and the decode benchmark on the lent GPU machine with
# binaries built on a dev machine and carried as build-cuda/device.txz
# (gpu_tests, tern_gpu_bench and, where built, tern and tern_gpu_quality,
# stripped, with the shared libraries tern links from the system's
# /lib/x86_64-linux-gnu but glibc's and libstdc++; ~23 MB, so it fits the
# device tool's carry beside the tree). Logs go to $OUT.
#   here:   cmake --build build-cuda --target tern gpu_tests tern_gpu_bench tern_gpu_quality
#           tests/cuda/device_run.sh --pack   (PACK_QUALITY=1 adds tern_gpu_quality, PACK_SM80=1
#           build-cuda80's gpu_tests: with both the pack outgrows the carry beside the tree)
#   there:  tests/cuda/device_run.sh            (from the repo root; carry build-cuda/device.txz)
# Environment there: GTEST_FILTER (default all), TESTS=0 skips gpu_tests, BENCH=0 skips the
# benchmark, BENCH_CONFIGS (and BENCH_BATCH) run only those tern_gpu_bench
# configurations instead of the standard set (BENCH_CHUNKS: its --chunks at batch 1), AB="cfg1 cfg2 ..." times each
# tern_gpu_bench configuration in a process of its own, AB_ROUNDS (2) times
# in turn, at AB_BATCH (8,64,256), 256-token prompts, 64 steps (ab.log),
# QUALITY=1 adds tern_gpu_quality (the FP8 forms against bf16 on the GPU; QUALITY_CONFIGS picks
# them) on models/ernie-demo's golden prompts and 8 random prompts of the full-size
# model (quality.md), TARGETS=1 the targets run through HTTP
# (bench/serving/run_gpu_targets.sh with the carried tern, TERN_BUDGET 45 s,
# VARIANT_BUDGET 30 s; targets.log, the whole run in results.txz),
# PROFILE=1 adds per-kernel GPU
# times of one decode step per batch size (ncu, summarized by ncu_summary.py), PROFILE_PREFILL=1 the
# same for one 2048-token prefill step (of each PROFILE_CONFIGS, default graphs), PROFILE_SASS=1 ncu's SASS-level
# stall samples of one decode step's decode_layers kernel (or the kernel
# SASS_KERNEL names), summed per stretch between barriers by
# sass_regions.py (sass_regions.txt) and per run of equally executed code by
# instructions executed (sass_runs.txt), SANITIZE=1 adds
# compute-sanitizer memcheck (SANITIZE_FILTER picks its tests), SM80=1 the
# compute_80 PTX build of gpu_tests where packed (the sm_80 code paths, JIT-compiled
# by the driver; gpu_tests_sm80.log), GEMM="ARGS" tern_gemm_bench with those arguments where packed
# (gemm.log), GEMM_NCU="RE;RE..." ncu's sections for the first kernel each names in that run (gemm_ncu.txt) and
# its SASS with executions and stall samples per instruction (gemm_sass_N.csv),
# SERVE_AB="FLAGS;FLAGS..." the bf16 server through HTTP once per set of flags (an empty set:
# the defaults), each at SERVE_AB_SCENARIOS (conc-64,conc-256), SERVE_AB_ROUNDS (1) times in turn
# (run_gpu_targets.sh with VARIANTS=none, TERN_BUDGET 25 s; serve_ab.log), ENGINE_AB="FLAGS;FLAGS..." the
# engine's closed loop without HTTP (`tern bench conc --concurrency ENGINE_AB_CONC`, 256) once per set of
# flags, ENGINE_AB_ROUNDS (2) times in turn (engine_ab.log). At the end,
# everything under $OUT but the main logs goes into $OUT/results.txz (the
# device tool brings back 8 files at most).
set -u
if [ "${1:-}" = "--pack" ]; then
  S=$(mktemp -d) && mkdir -p "$S/lib"
  # The carry holds 64 MiB with the tree (33 MB): tern_gpu_quality and the sm_80 tests only when asked for.
  for b in gpu_tests tern_gpu_bench tern tern_gemm_bench $([ "${PACK_QUALITY:-0}" = 1 ] && echo tern_gpu_quality); do
    [ -x "build-cuda/bin/$b" ] && strip -o "$S/$b" "build-cuda/bin/$b"
  done
  # gpu_tests as compute_80 PTX (a build-cuda80 configured with -DTERN_CUDA_ARCHS=80-virtual), with PACK_SM80=1.
  [ "${PACK_SM80:-0}" = 1 ] && [ -x build-cuda80/bin/gpu_tests ] && strip -o "$S/gpu_tests_sm80" build-cuda80/bin/gpu_tests
  ldd build-cuda/bin/gpu_tests $([ -x build-cuda/bin/tern ] && echo build-cuda/bin/tern) |
    awk '$3 ~ /^\/lib\/x86_64-linux-gnu\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|libgcc_s|libstdc\+\+)\.so' | xargs -I{} cp -L {} "$S/lib/"
  git rev-parse --short HEAD >"$S/COMMIT"  # the tree the binaries were built from, for the reports
  tar -cJf build-cuda/device.txz -C "$S" . && rm -rf "$S"
  ls -la build-cuda/device.txz
  exit 0
fi
D=/tmp/tern-device
rm -rf "$D" && mkdir -p "$D" && tar -xJf build-cuda/device.txz -C "$D" || { echo "no build-cuda/device.txz: run --pack here and carry it"; exit 1; }
export TERN_COMMIT=${TERN_COMMIT:-$(cat "$D/COMMIT")}
OUT=${OUT:-/tmp/tern-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if ldd "$D/gpu_tests" | grep -q "libcublas.*not found"; then
  cublas=$(find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
  # After the carried libraries: a folder of the image's other CUDA libraries must not shadow them.
  export LD_LIBRARY_PATH="$D/lib:$(dirname "$cublas"):$LD_LIBRARY_PATH"
fi
ldd "$D/gpu_tests" | grep "not found"
# The test binaries were built with the data folder at /work/main/tests/data.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
# Can this image build tern itself? (the dev packages tern needs)
for h in sentencepiece_processor.h spdlog/spdlog.h nlohmann/json.hpp gtest/gtest.h; do
  [ -e "/usr/include/$h" ] || echo "GPU image lacks /usr/include/$h: carry binaries built elsewhere"
done
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
python3 tools/make_random_model.py --out /tmp/m --tokenizer-from tests/data/ernie-tiny >"$OUT/make_model.log" 2>&1 &
maker=$!
if [ "${TESTS:-1}" = 1 ]; then
  timeout 240 "$D/gpu_tests" 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "^\[batched|^\[engine\] [0-9]|^\[greedy|^\[graphs|^\[decode kernel|pdl turned|FAILED|PASSED|Failure|error|Expected|Which is|  Actual" | head -60
fi
if [ "${SM80:-0}" = 1 ] && [ -x "$D/gpu_tests_sm80" ]; then
  timeout 300 "$D/gpu_tests_sm80" 2>&1 | tee "$OUT/gpu_tests_sm80.log" | grep -E "FAILED|PASSED|Failure" | head -30
fi
wait $maker || { echo "make_random_model failed"; tail -5 "$OUT/make_model.log"; }
if [ -n "${BENCH_CONFIGS:-}" ]; then
  timeout 120 "$D/tern_gpu_bench" --model /tmp/m --configs "$BENCH_CONFIGS" --batch "${BENCH_BATCH:-1,4,8,64,256}" \
    --steps 256 ${BENCH_CHUNKS:+--chunks "$BENCH_CHUNKS"} >"$OUT/bench.log" 2>&1
  grep -E "\] create|turned off|kernel off|one sequence, steps|^\| [a-z0-9]|tern_gpu_bench:" "$OUT/bench.log"
elif [ "${BENCH:-1}" = 1 ]; then
  timeout 90 "$D/tern_gpu_bench" --model /tmp/m --configs graphs,eager --batch 1,4,8,64,256 --steps 256 >"$OUT/bench.log" 2>&1
  timeout 40 "$D/tern_gpu_bench" --model /tmp/m --configs pdl,gemv8,cublas --batch 1,4,8 --steps 256 >>"$OUT/bench.log" 2>&1
  grep -E "\] create|pdl turned|^\| [a-z0-9]|tern_gpu_bench:" "$OUT/bench.log"
fi
if [ -n "${AB:-}" ]; then  # one process per configuration: a process's first configuration runs a few % faster
  for round in $(seq "${AB_ROUNDS:-2}"); do
    for cfg in $AB; do
      timeout 60 "$D/tern_gpu_bench" --model /tmp/m --configs "$cfg" --batch "${AB_BATCH:-8,64,256}" --prompt 256 \
        --steps 64 >>"$OUT/ab.log" 2>&1
    done
  done
  grep -E "\] create failed|^\| [a-z0-9]|tern_gpu_bench:" "$OUT/ab.log"
fi
if [ "${QUALITY:-0}" = 1 ] && [ -x "$D/tern_gpu_quality" ]; then
  q="${QUALITY_CONFIGS:-fp8,fp8-fast,kv-fp8,fp8+kv-fp8,fp8-fast+kv-fp8}"
  timeout 60 "$D/tern_gpu_quality" --model models/ernie-demo --configs "$q" >"$OUT/quality.md" 2>&1
  timeout 120 "$D/tern_gpu_quality" --model /tmp/m --random 8 --configs "$q" >>"$OUT/quality.md" 2>&1
  cat "$OUT/quality.md"
fi
if [ "${TARGETS:-0}" = 1 ] && [ -x "$D/tern" ]; then
  TERN_BIN="$D/tern" BENCH_MODEL=/tmp/m TERN_BUDGET=${TERN_BUDGET:-45} VARIANT_BUDGET=${VARIANT_BUDGET:-30} \
    timeout 420 bash bench/serving/run_gpu_targets.sh "$OUT/targets" >"$OUT/targets.log" 2>&1
  cat "$OUT/targets.log"
fi
if [ -n "${GEMM:-}" ] && [ -x "$D/tern_gemm_bench" ]; then
  # shellcheck disable=SC2086  # GEMM holds the arguments, split on spaces
  timeout 150 "$D/tern_gemm_bench" $GEMM >"$OUT/gemm.log" 2>&1
  grep -E "^[a-z_-]+ +[0-9]+ x|linear\(\)|k-splits|best:" "$OUT/gemm.log" | head -80
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "${GEMM_NCU:-}" ] && [ -n "${GEMM:-}" ] && [ -n "$NCU" ] && [ -x "$D/tern_gemm_bench" ]; then
  # For each regex in GEMM_NCU (separated by ';'): ncu's throughput, memory and warp-stall sections for the first
  # kernel whose demangled name matches it, run by tern_gemm_bench $GEMM (gemm_ncu.txt).
  IFS=';' read -r -a ncu_regexes <<<"$GEMM_NCU"
  n=0
  for re in "${ncu_regexes[@]}"; do
    n=$((n + 1))
    rm -f "/tmp/gemm_ncu_$n.ncu-rep"
    # shellcheck disable=SC2086
    timeout 120 "$NCU" --kernel-name-base demangled -k "regex:$re" -c 1 -o "/tmp/gemm_ncu_$n" \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
      --section LaunchStats --section SourceCounters --metrics "regex:^(smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio|\
sm__pipe_tensor_op_gmma.*pct_of_peak_sustained_active|sm__inst_executed_pipe_tensor_op_gmma.*sum)$" \
      "$D/tern_gemm_bench" $GEMM >>"$OUT/gemm_ncu.log" 2>&1
    echo "gemm ncu '$re' rc=$?"
    "$NCU" --import "/tmp/gemm_ncu_$n.ncu-rep" >>"$OUT/gemm_ncu.txt" 2>&1
    # Per SASS instruction: executions and stall samples (gemm_sass_N.csv).
    "$NCU" --import "/tmp/gemm_ncu_$n.ncu-rep" --page source --csv --print-source sass >"$OUT/gemm_sass_$n.csv" 2>&1
  done
  grep -E "gemm_sm90_kernel|Duration|Throughput|Stall|Warp Cycles|Achieved Occ|Registers" "$OUT/gemm_ncu.txt" | head -90
fi
if [ -n "${SERVE_AB:-}" ] && [ -x "$D/tern" ]; then
  IFS=';' read -r -a flag_sets <<<"$SERVE_AB"
  for round in $(seq "${SERVE_AB_ROUNDS:-1}"); do
    for i in "${!flag_sets[@]}"; do
      echo "== round $round, flags: ${flag_sets[$i]:-(defaults)}" >>"$OUT/serve_ab.log"
      TERN_BIN="$D/tern" BENCH_MODEL=/tmp/m TERN_BUDGET=25 VARIANTS=none TARGETS_ARGS="${flag_sets[$i]}" \
        BF16_SCENARIOS=${SERVE_AB_SCENARIOS:-conc-64,conc-256} timeout 150 bash bench/serving/run_gpu_targets.sh \
        "$OUT/serve_ab/$round-$i" >>"$OUT/serve_ab.log" 2>&1
    done
  done
  cat "$OUT/serve_ab.log"
fi
if [ -n "${ENGINE_AB:-}" ] && [ -x "$D/tern" ]; then
  IFS=';' read -r -a flag_sets <<<"$ENGINE_AB"
  for round in $(seq "${ENGINE_AB_ROUNDS:-2}"); do
    for i in "${!flag_sets[@]}"; do
      echo "== round $round, flags: ${flag_sets[$i]:-(defaults)}" >>"$OUT/engine_ab.log"
      # shellcheck disable=SC2086  # a flag set is split on spaces
      timeout 60 "$D/tern" bench conc --concurrency "${ENGINE_AB_CONC:-256}" --model /tmp/m --device cuda \
        ${flag_sets[$i]} 2>&1 | grep -E "tok/s|first token|rror" >>"$OUT/engine_ab.log"
    done
  done
  cat "$OUT/engine_ab.log"
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ "${PROFILE:-0}" = 1 ] && [ -n "$NCU" ]; then
  TERN_PROFILE_STEP=8 timeout 50 "$NCU" --profile-from-start off --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv "$D/tern_gpu_bench" --model /tmp/m --configs graphs \
    --batch 1,64,256 --steps 16 >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
  echo "ncu rc=$?"; tail -3 "$OUT/ncu.err"
  python3 bench/kernels/ncu_summary.py "$OUT/ncu.csv" | tee "$OUT/ncu_summary.txt" | head -70
fi
if [ "${PROFILE_PREFILL:-0}" = 1 ] && [ -n "$NCU" ]; then  # one 2048-token prefill step (8 x 256)
  TERN_PROFILE_PREFILL=1 timeout 60 "$NCU" --profile-from-start off --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv "$D/tern_gpu_bench" --model /tmp/m --configs "${PROFILE_CONFIGS:-graphs}" \
    --batch 8 --steps 8 >"$OUT/ncu_prefill.csv" 2>"$OUT/ncu_prefill.err"
  echo "ncu prefill rc=$?"; tail -3 "$OUT/ncu_prefill.err"
  python3 bench/kernels/ncu_summary.py "$OUT/ncu_prefill.csv" | tee "$OUT/ncu_prefill_summary.txt" | head -70
fi
if [ "${PROFILE_SASS:-0}" = 1 ] && [ -n "$NCU" ]; then  # batch 1: the persistent decode kernel
  rm -f /tmp/tern_sass.ncu-rep
  TERN_PROFILE_STEP=8 timeout 120 "$NCU" --profile-from-start off --clock-control none \
    -k "regex:${SASS_KERNEL:-decode_layers}" --section SourceCounters --section WarpStateStats -o /tmp/tern_sass \
    "$D/tern_gpu_bench" --model /tmp/m --configs graphs --batch 1 --steps 16 >"$OUT/ncu_sass.log" 2>&1
  echo "ncu sass rc=$?"
  "$NCU" --import /tmp/tern_sass.ncu-rep --page source --csv --print-source sass >"$OUT/source_sass.csv" 2>&1
  python3 bench/kernels/sass_regions.py "$OUT/source_sass.csv" | tee "$OUT/sass_regions.txt" | head -20
  python3 bench/kernels/sass_regions.py "$OUT/source_sass.csv" --split runs --sort executed > "$OUT/sass_runs.txt"
fi
if [ "${SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  timeout 150 compute-sanitizer --tool memcheck "$D/gpu_tests" --gtest_filter="${SANITIZE_FILTER:-*}" >"$OUT/sanitizer.log" 2>&1
  echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log" | tail -4
fi
# The device tool brings back 8 files: the main logs, and everything in results.txz.
tar -cJf /tmp/tern-results.txz -C "$OUT" . && mv /tmp/tern-results.txz "$OUT/results.txz"
find "$OUT" -mindepth 1 -maxdepth 1 ! -name results.txz ! -name gpu_tests.log ! -name bench.log ! -name ab.log \
  ! -name quality.md ! -name targets.log ! -name ncu_summary.txt ! -name gpu_tests_sm80.log ! -name gemm.log \
  ! -name serve_ab.log ! -name engine_ab.log \
  -exec rm -rf {} +
