#!/usr/bin/env bash
# The environment llama.cpp's convert_hf_to_gguf.py runs in: a venv of its own
# in CONVERT_VENV (default LLAMA_DIR/convert-venv, outside the repo) with torch
# (PyPI's wheel) and the pins of llama.cpp's requirements-convert_*.txt; the
# converter takes gguf-py from its own source tree. Cached: nothing is
# installed when the venv already imports what the converter needs. Used by
# llama_cpp_cpu_bench.sh (make bench-cpu) and tests/compat (make compat).
# Prints the venv's python on its last line (python=...).
set -euo pipefail

LLAMA_DIR=${LLAMA_DIR:-$HOME/.cache/tern/llama.cpp}
CONVERT_VENV=${CONVERT_VENV:-$LLAMA_DIR/convert-venv}

if ! "$CONVERT_VENV/bin/python" -c "import torch, transformers, sentencepiece, safetensors, google.protobuf" \
    2>/dev/null; then
  echo "llama_cpp_convert_env: setting up $CONVERT_VENV (torch and the converter's requirements; large download)" >&2
  python3 -m venv "$CONVERT_VENV"
  "$CONVERT_VENV/bin/pip" install -q "torch==2.11.0" "numpy~=2.2.6" "sentencepiece>=0.1.98,<0.3.0" \
    "transformers==4.57.6" safetensors "protobuf>=4.21.0,<5.0.0" pyyaml >&2
fi
echo "python=$CONVERT_VENV/bin/python"
