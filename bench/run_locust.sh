#!/usr/bin/env bash
# The articles' load test against `tern serve`: starts the server with MODEL,
# runs bench/locust/locustfile.py headless for each user count (random
# 50-500-character Chinese prompts, streamed), and writes success rate, QPS,
# P50/P95/P99 of the total time and of the time to first token into the
# section LABEL of docs/benchmarks.md. Needs no network: tern, the model
# folder and the venv's locust (scripts/requirements.txt).
#
#   bench/run_locust.sh TERN_BIN MODEL_DIR LABEL [USERS...]      (default users: 100)
#   e.g. bench/run_locust.sh build/bin/tern tests/data/ernie-tiny cpu-tiny 100
#        bench/run_locust.sh build/bin/tern models/ernie-4.5-0.3b-random gpu-random 100 500
#
# Environment: DURATION (seconds per run, 60), SPAWN_RATE (users started per
# second, 20), STOP_TIMEOUT (seconds the requests running at the end may take
# to finish, 120), LOCUST_MAX_TOKENS (128), SERVE_FLAGS (more `tern serve`
# flags), PYTHON (.venv/bin/python), OUT (bench/results/locust-LABEL; the
# locust CSV files, logs and summaries).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 3 ]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
tern_bin=$1 model=$2 label=$3
shift 3
users=("$@")
[ ${#users[@]} -gt 0 ] || users=(100)
duration=${DURATION:-60}
spawn_rate=${SPAWN_RATE:-20}
stop_timeout=${STOP_TIMEOUT:-120}
python=${PYTHON:-.venv/bin/python}
out=${OUT:-bench/results/locust-$label}
export LOCUST_MAX_TOKENS=${LOCUST_MAX_TOKENS:-128}
mkdir -p "$out"

log="$out/serve.log"
# shellcheck disable=SC2086  # SERVE_FLAGS is a list of flags
"$tern_bin" serve --model "$model" --host 127.0.0.1 --port 0 --disable-log-requests ${SERVE_FLAGS:-} 2>"$log" &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
url=""
for _ in $(seq 1 600); do
  url=$(sed -n 's/.*listening on \(http:\/\/[0-9.]*:[0-9]*\).*/\1/p' "$log" | head -n 1)
  [ -n "$url" ] && break
  kill -0 $server 2>/dev/null || { cat "$log"; echo "run_locust: tern serve exited" >&2; exit 1; }
  sleep 0.5
done
[ -n "$url" ] || { echo "run_locust: tern serve did not start" >&2; exit 1; }
until curl -sf "$url/health" >/dev/null; do sleep 0.5; done
echo "run_locust: tern serve on $url ($model)"

load=$(cut -d' ' -f1-3 /proc/loadavg)
runs=()
for n in "${users[@]}"; do
  echo "run_locust: $n users for ${duration}s"
  LOCUST_SUMMARY_JSON="$out/users-$n.json" "$python" -m locust -f bench/locust/locustfile.py --host "$url" \
    --headless -u "$n" -r "$spawn_rate" -t "${duration}s" --stop-timeout "$stop_timeout" --csv "$out/users-$n" \
    --only-summary >"$out/users-$n.log" 2>&1 || true
  [ -s "$out/users-$n.json" ] || {
    tail -n 30 "$out/users-$n.log"; echo "run_locust: locust wrote no statistics" >&2; exit 1; }
  runs+=("$n users=$out/users-$n.json")
done

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
commit=$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
notes="\`bench/run_locust.sh $tern_bin $model $label ${users[*]}\` at $commit on $(date -u +%Y-%m-%d):"
notes+=" ${duration} s per run, $spawn_rate users started per second, each user waiting 1-3 s between requests,"
notes+=" random 50-500-character Chinese prompts, streamed, max_tokens $LOCUST_MAX_TOKENS;"
notes+=" ${gpu:-no GPU}, $(nproc) CPU cores ($cpu), load average $load before the first run."
notes+=" Success: HTTP 200 and a stream that ends with [DONE]."
notes+=" QPS: finished chat requests per second over the run; total: the time to [DONE]; TTFT: to the first text."
"$python" bench/locust/summarize.py --doc docs/benchmarks.md --label "$label" \
  --title "Locust: $label ($(basename "$model"))" --notes "$notes" "${runs[@]}"
