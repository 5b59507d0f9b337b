#!/usr/bin/env bash
# make compat: tern and llama.cpp on each other's GGUF files (tests/compat),
# then docs/compat.md from the results. Builds llama.cpp's CPU tools from
# llama-cpp-python's source package and the converter's venv first, both
# cached outside the repo in LLAMA_DIR (build_llama_cpp.sh,
# llama_cpp_convert_env.sh); the files the tests write stay in COMPAT_DIR
# (build/compat) and are reused while their inputs are older.
#
#   TERN_BIN=build/bin/tern tests/compat/run.sh [pytest args]
#
# Env: LLAMA_DIR, TERN_BIN, PYTHON (.venv/bin/python), COMPAT_DIR, COMPAT_THREADS (2),
# COMPAT_REPORT (docs/compat.md; empty: no report).
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
PY=${PYTHON:-.venv/bin/python}
export TERN_BIN=$(realpath "${TERN_BIN:-build/bin/tern}")
export COMPAT_DIR=$(realpath -m "${COMPAT_DIR:-build/compat}")
# tern's exact kernels (fp32 activations): the tiny models' greedy margins are below bf16 rounding,
# and the KL tables measure the files' quantization alone.
export TERN_CPU_KERNELS=${TERN_CPU_KERNELS:-optimized}
mkdir -p "$COMPAT_DIR"

eval "$(LLAMA_TOOLS="llama-server llama-quantize llama-perplexity" \
  bench/serving/baselines/build_llama_cpp.sh | tail -n 2)"  # sets src= and bin=
eval "$(bench/serving/baselines/llama_cpp_convert_env.sh | tail -n 1)"  # sets python=
export LLAMA_SRC=$src LLAMA_BIN=$bin CONVERT_PYTHON=$python
setup=$(( $(date +%s) - start ))
echo "compat: llama.cpp and its converter ready after ${setup} s"

status=0
"$PY" -m pytest -q -p no:cacheprovider tests/compat "$@" || status=$?
report=${COMPAT_REPORT-docs/compat.md}
if [ -n "$report" ] && [ -f "$COMPAT_DIR/results.json" ]; then
  "$PY" tests/compat/report.py "$COMPAT_DIR/results.json" "$report" --setup-seconds "$setup" \
    --total-seconds $(( $(date +%s) - start ))
fi
echo "compat: done in $(( $(date +%s) - start )) s (setup ${setup} s), pytest status $status"
exit $status
