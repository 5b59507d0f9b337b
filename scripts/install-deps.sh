#!/usr/bin/env bash
# Installs every Debian package and Python package that building, testing and
# the tools need. Idempotent: when everything is present it does nothing and
# prints nothing. Python packages go into a virtual environment at .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=(
  build-essential cmake pkg-config ccache git
  libsentencepiece-dev nlohmann-json3-dev libspdlog-dev libcli11-dev libboost-dev
  libgtest-dev libgmock-dev libopenblas-dev
  libcurl4-openssl-dev libssl-dev  # hub downloads: libcurl; LFS files' sha256: libcrypto; HTTPS: libssl
  libedit-dev  # tern chat: line editing and history (BSD licence)
  clang-14 libclang-rt-14-dev llvm-14  # make fuzz: clang, libFuzzer + sanitizer runtimes, llvm-symbolizer
  python3 python3-venv python3-dev
  libjs-marked node-dompurify libjs-highlight.js  # the chat page's libraries, embedded in tern at build time
  chromium chromium-driver  # browser tests of the chat page (tests/browser)
  fonts-wqy-microhei fonts-noto-color-emoji  # Chinese and emoji glyphs for chromium's screenshots
  curl  # bench/run_locust.sh waits for /health with it
  openssl  # tests/e2e/test_security.py makes its certificates with the openssl CLI
  gdb  # a tern serve that does not exit on SIGTERM in a test: every thread's stack goes into its log
)

missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python: a venv made by Debian's python3 so it does not depend on the user's shell setup.
req=scripts/requirements.txt
stamp=.venv/.requirements.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-deps: setting up the Python environment in .venv"
  [ -x .venv/bin/python ] || /usr/bin/python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -r "$req"
  echo "$want" > "$stamp"
fi
