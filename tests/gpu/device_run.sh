#!/usr/bin/env bash
# Runs the GPU tests and the decode benchmark on the lent GPU machine with
# binaries built on a dev machine and carried in build-cuda/device (bin +
# the few shared libraries the GPU image lacks). Logs go to $OUT.
#   here:   tests/gpu/device_run.sh --pack     (after cmake --build build-cuda)
#   there:  tests/gpu/device_run.sh            (from the repo root)
set -u
D=build-cuda/device
if [ "${1:-}" = "--pack" ]; then
  rm -rf "$D" && mkdir -p "$D/lib"
  cp build-cuda/bin/gpu_tests build-cuda/bin/tern_gpu_bench "$D/"
  for lib in libsentencepiece.so.0 libspdlog.so.1.10 libfmt.so.9; do
    cp -L "/lib/x86_64-linux-gnu/$lib" "$D/lib/"
  done
  du -sh "$D"
  exit 0
fi
OUT=${OUT:-/tmp/tern-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if ldd "$D/gpu_tests" | grep -q "libcublas.*not found"; then
  cublas=$(find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
  export LD_LIBRARY_PATH="$(dirname "$cublas"):$LD_LIBRARY_PATH"
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
timeout 240 "$D/gpu_tests" 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "^\[golden|^\[batched|^\[engine|FAILED|PASSED|Failure|error|Expected|Which is|rel|  Actual" | head -120
wait $maker || { echo "make_random_model failed"; tail -5 "$OUT/make_model.log"; }
timeout 120 "$D/tern_gpu_bench" --model /tmp/m --batch 1,64 2>&1 | tee "$OUT/bench.log"
if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  timeout 150 compute-sanitizer --tool memcheck "$D/gpu_tests" >"$OUT/sanitizer.log" 2>&1
  echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log" | tail -4
fi
