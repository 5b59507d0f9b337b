#!/usr/bin/env bash
# Builds llama.cpp's CPU tools (llama-bench, llama-server, llama-quantize, llama-cli)
# from the source distribution of llama-cpp-python on PyPI, which carries llama.cpp's
# full source under vendor/llama.cpp. Everything lands in LLAMA_DIR, outside the repo;
# nothing of llama.cpp is ever committed. Cached: a step is skipped when its output exists.
#
#   LLAMA_DIR=/work/llama bench/serving/baselines/build_llama_cpp.sh
#
# LLAMA_TOOLS: the targets wanted (default all four; a caller that needs fewer names them).
# Prints the source dir and the bin dir on its last two lines (src=..., bin=...).
set -euo pipefail

LLAMA_DIR=${LLAMA_DIR:-$HOME/.cache/tern/llama.cpp}
LLAMA_CPP_PYTHON_VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}

pkg="llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}"
tarball="$LLAMA_DIR/$pkg.tar.gz"
src="$LLAMA_DIR/$pkg/vendor/llama.cpp"
build="$LLAMA_DIR/build-$LLAMA_CPP_PYTHON_VERSION-cpu"
bin="$build/bin"
read -r -a tools <<< "${LLAMA_TOOLS:-llama-bench llama-server llama-quantize llama-cli}"

mkdir -p "$LLAMA_DIR"

if [ ! -f "$tarball" ]; then
  echo "build_llama_cpp: downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (source) into $LLAMA_DIR" >&2
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$LLAMA_DIR" >&2
fi

if [ ! -f "$src/CMakeLists.txt" ]; then
  echo "build_llama_cpp: unpacking $tarball" >&2
  tar -xzf "$tarball" -C "$LLAMA_DIR"
fi

missing=0
for t in "${tools[@]}"; do [ -x "$bin/$t" ] || missing=1; done
if [ "$missing" = 1 ]; then
  echo "build_llama_cpp: building ${tools[*]} in $build (takes a while on few cores)" >&2
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >&2
  cmake --build "$build" -j "$JOBS" --target "${tools[@]}" >&2
else
  echo "build_llama_cpp: cached in $bin" >&2
fi

echo "src=$src"
echo "bin=$bin"
