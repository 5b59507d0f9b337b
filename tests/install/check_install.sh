#!/usr/bin/env bash
# `cmake --install` of an already built tree into a temporary prefix, then a
# consumer project outside the tree built against it twice, with
# find_package(tern) and with pkg-config, each run on the tiny model.
#   check_install.sh BUILD_DIR MODEL
set -euo pipefail
build=$1
model=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in include/tern/tern.h bin/tern; do
  [ -e "$work/prefix/$f" ] || { echo "install: $f is missing"; exit 1; }
done
libdir=$(dirname "$(find "$work/prefix" -name tern.pc)")/..
[ -e "$libdir/libtern.so" ] || { echo "install: libtern.so is missing"; exit 1; }
if find "$work/prefix" -name '*.a' | grep -q .; then
  echo "install: static libraries were installed"; exit 1
fi

# find_package(tern)
cmake -S "$here/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer" "$model"

# pkg-config
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -std=c99 -Wall -Werror -o "$work/pc-consumer" "$here/consumer/consumer.c" $(pkg-config --cflags --libs tern) \
  -Wl,-rpath,"$(pkg-config --variable=libdir tern)"
"$work/pc-consumer" "$model"
echo "install: find_package and pkg-config consumers both ran"
