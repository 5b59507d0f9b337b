#!/usr/bin/env bash
# Builds the tarball run.sh unpacks on a machine with another CPU (and perhaps an older OS): bin/ (tern,
# tern_cpu_linear_bench), lib/ (their non-glibc shared libs, libstdc++ too), glibc/ (libc, libm, the loader,
# other glibc-internal libs), llama/ (llama-bench, its libs, every ggml-cpu variant).
#   TERN_BIN_DIR=build-cpu/bin LLAMA_PORTABLE_BIN=DIR bench/serving/baselines/device_cpu/make_pack.sh [PACK]
# LLAMA_PORTABLE_BIN: llama.cpp (from llama-cpp-python's source, build_llama_cpp.sh's src=) built outside the
# repo so that it runs on any x86-64 CPU, picking its kernels at run time:
#   cmake -S SRC -B DIR -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON \
#     -DGGML_CPU_ALL_VARIANTS=ON -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
#     -DLLAMA_BUILD_EXAMPLES=OFF && cmake --build DIR --target llama-bench <every ggml-cpu-* target>
# PACK defaults to .devpack/cpu16/pack.txz (.devpack/ is git-ignored, so a device run can carry it).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../../../.." && pwd)
BIN=${TERN_BIN_DIR:-$REPO/build-cpu/bin}
LLB=${LLAMA_PORTABLE_BIN:?set LLAMA_PORTABLE_BIN to the portable llama.cpp build bin/}
PACK=${1:-$REPO/.devpack/cpu16/pack.txz}
mkdir -p "$(dirname "$PACK")"
S=/tmp/cpu16pack; rm -rf $S; mkdir -p $S/bin $S/lib $S/glibc $S/llama
cp $BIN/tern $BIN/tern_cpu_linear_bench $S/bin/
cp -a $LLB/llama-bench $S/llama/
for f in $LLB/*.so*; do cp -a "$f" $S/llama/; done
isglibc() { case "$(basename "$1")" in libc.so*|libm.so*|ld-linux*|libresolv.so*|libpthread.so*|libdl.so*|librt.so*|libutil.so*|libnss*|libanl.so*|libmvec.so*) return 0;; esac; return 1; }
for f in $S/bin/* $S/llama/llama-bench $S/llama/*.so; do
  [ -L "$f" ] && continue
  ldd "$f" | awk '/=>/ && $3 ~ /^\// {print $3} /^\s*\/lib64\/ld-linux/ {print $1}'
done | sort -u | while read -r l; do
  case "$l" in "$LLB"/*) continue;; esac
  if isglibc "$l"; then cp -L "$l" $S/glibc/; else cp -L "$l" $S/lib/; fi
done
cp -L /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libm.so.6 /lib64/ld-linux-x86-64.so.2 $S/glibc/ 2>/dev/null || true
strip --strip-unneeded $S/bin/* $S/lib/* 2>/dev/null || true
find $S/llama -type f \( -name '*.so*' -o -name llama-bench \) -exec strip --strip-unneeded {} \;
du -sh $S/*; ls -la $S/lib $S/glibc $S/llama
tar -C $S -cJf "$PACK.tmp" bin lib glibc llama && mv "$PACK.tmp" "$PACK"
ls -la "$PACK"
