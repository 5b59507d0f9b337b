#!/usr/bin/env bash
# tern against llama.cpp on this machine's CPU, llama-bench's way (pp512 / tg128, 3 runs after a warm-up).
#   OUT=/some/dir bash bench/serving/baselines/device_cpu/run.sh   (from the repo root; PACK: make_pack.sh's
#   tarball, default .devpack/cpu16/pack.txz, carried to the machine as an ignored path)
# Env (local tests): W (work dir, /tmp/cpu16w), MODEL_SRC (random | an HF folder), PY (python3),
# PP (512) TG (128) REPS (3), TMAIN (16) TSECOND (8), BUDGET (seconds, 420), FORCE_MODE (A|B),
# SCALING=1 (a thread-scaling section after the passes).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../../.." && pwd)
PACK=${PACK:-$REPO/.devpack/cpu16/pack.txz}
OUT=${OUT:?OUT not set}
W=${W:-/tmp/cpu16w}
R=$W/results; G=$W/g; M=$W/rnd
PP=${PP:-512}; TG=${TG:-128}; REPS=${REPS:-3}
TMAIN=${TMAIN:-16}; TSECOND=${TSECOND:-8}
BUDGET=${BUDGET:-420}
MODEL_SRC=${MODEL_SRC:-random}
TOKSRC=$REPO/tests/data/ernie-tiny
if [ -z "${PY:-}" ]; then  # first python with numpy, else first with torch, else python3
  for c in python3 python /usr/bin/python3 /opt/conda/bin/python /usr/local/bin/python3; do
    command -v "$c" > /dev/null 2>&1 && "$c" -c 'import numpy' > /dev/null 2>&1 && { PY=$c; break; }; done
  if [ -z "${PY:-}" ]; then for c in python3 python /opt/conda/bin/python; do
    command -v "$c" > /dev/null 2>&1 && "$c" -c 'import torch' > /dev/null 2>&1 && { PY=$c; break; }; done; fi
  PY=${PY:-python3}
fi
START=$(date +%s)
rm -rf "$W"; mkdir -p "$W" "$R" "$G" "$OUT"
exec > >(tee -a "$R/run.log") 2>&1
el() { echo $(( $(date +%s) - START )); }
note() { echo "[run.sh +$(el)s] $*"; }
snap() { tar -czf "$OUT/results.tgz.tmp" -C "$W" results 2>/dev/null && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"; }

note "start $(date -u) in $REPO, OUT=$OUT, W=$W, PY=$PY"
tar -xJf "$PACK" -C "$W" || { note "FAIL: unpack $PACK"; snap; exit 1; }
ls -la "$W" "$W/bin" "$W/llama" | head -60

# --- how to run the carried binaries: A = system glibc + carried libs; B = carried glibc's loader.
LDSO=$W/glibc/ld-linux-x86-64.so.2
modeA_ok() {
  env LD_LIBRARY_PATH="$W/lib" "$W/bin/tern" --version > /dev/null 2>&1 || return 1
  env LD_LIBRARY_PATH="$W/lib" "$W/bin/tern_cpu_linear_bench" --help 2>&1 | grep -q usage || return 1
  (cd "$W/llama" && env LD_LIBRARY_PATH="$W/llama:$W/lib" ./llama-bench --help 2>&1 | grep -q usage) || return 1
}
MODE=${FORCE_MODE:-}
if [ -z "$MODE" ]; then if modeA_ok; then MODE=A; else MODE=B; fi; fi
if [ "$MODE" = A ]; then
  TERN=(env LD_LIBRARY_PATH="$W/lib" "$W/bin/tern")
  BWB=(env LD_LIBRARY_PATH="$W/lib" "$W/bin/tern_cpu_linear_bench")
  LB=(env LD_LIBRARY_PATH="$W/llama:$W/lib" "$W/llama/llama-bench")
else
  TERN=("$LDSO" --library-path "$W/lib:$W/glibc" "$W/bin/tern")
  BWB=("$LDSO" --library-path "$W/lib:$W/glibc" "$W/bin/tern_cpu_linear_bench")
  LB=("$LDSO" --library-path "$W/llama:$W/lib:$W/glibc" "$W/llama/llama-bench")
fi
note "binary mode $MODE"
"${TERN[@]}" --version || note "WARN: tern --version failed"

# --- CPUs: with more CPUs allowed than TMAIN, pin every run to TMAIN physical cores of one package.
NCPU=$(nproc)
PIN=()
if [ "$NCPU" -lt "$TMAIN" ]; then
  note "only $NCPU CPUs: TMAIN $TMAIN -> $NCPU"; TMAIN=$NCPU; TSECOND=$(( NCPU / 2 > 0 ? NCPU / 2 : 1 ))
elif [ "$NCPU" -gt "$TMAIN" ]; then
  LIST=$("$PY" - "$TMAIN" << 'EOF' 2>/dev/null
import os, sys
n = int(sys.argv[1]); allowed = sorted(os.sched_getaffinity(0))
def rd(p):
    try:
        return open(p).read().strip()
    except OSError:
        return ""
def first(s):
    s = s.split(",")[0].split("-")[0]
    return int(s) if s.isdigit() else None
pkg = lambda c: rd(f"/sys/devices/system/cpu/cpu{c}/topology/physical_package_id")
prim = [c for c in allowed if first(rd(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")) in (c, None)
        or first(rd(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")) not in allowed]
p0 = pkg(allowed[0])
order = [c for c in prim if pkg(c) == p0] + [c for c in prim if pkg(c) != p0] + [c for c in allowed if c not in prim]
print(",".join(map(str, order[:n])))
EOF
)
  if [ -n "$LIST" ] && command -v taskset > /dev/null; then PIN=(taskset -c "$LIST"); note "$NCPU CPUs allowed: pinning runs to $LIST"
  else note "WARN: $NCPU CPUs allowed and no pin list/taskset: unpinned"; fi
fi

# --- 1. the machine and its read bandwidth
{
  echo "date: $(date -u)"; echo "nproc: $NCPU"; echo "binary mode: $MODE"; echo "pin: ${PIN[*]:-none}"
  echo "TMAIN=$TMAIN TSECOND=$TSECOND PP=$PP TG=$TG REPS=$REPS"
  echo "--- lscpu"; lscpu 2>&1 || grep -m1 "model name" /proc/cpuinfo
  echo "--- affinity"; taskset -pc $$ 2>&1
  echo "--- cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null)"
  echo "--- governor: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null)"
  echo "--- memory"; free -g 2>&1
  echo "--- numa"; (numactl -H 2>/dev/null || ls /sys/devices/system/node/ 2>/dev/null) | head -20
  echo "--- os"; uname -a; head -3 /etc/os-release 2>/dev/null; ldd --version 2>&1 | head -1
  echo "--- python: $("$PY" --version 2>&1); numpy: $("$PY" -c 'import numpy; print(numpy.__version__)' 2>&1 | tail -1)"
  echo "--- gpu"; timeout 20 nvidia-smi -L 2>&1 | head -4
  echo "--- loadavg $(cat /proc/loadavg)"
} > "$R/machine.txt" 2>&1
cp "$R/machine.txt" "$OUT/machine.txt"
note "bandwidth"
{
  echo "# tern_cpu_linear_bench --bandwidth-only --threads 1,$TSECOND,$TMAIN (${PIN[*]:-unpinned})"
  timeout 90 ${PIN[@]+"${PIN[@]}"} "${BWB[@]}" --bandwidth-only --threads "1,$TSECOND,$TMAIN"; echo "rc=$?"
} > "$R/bandwidth.txt" 2>&1
cat "$R/bandwidth.txt"; cp "$R/bandwidth.txt" "$OUT/bandwidth.txt"; snap

# --- 2. the model and its four GGUF files (tern's own converter and quantizer)
if [ "$MODEL_SRC" = random ]; then
  note "random model (numpy: $("$PY" -c 'import numpy' > /dev/null 2>&1 && echo yes || echo no))"
  if "$PY" -c 'import numpy' > /dev/null 2>&1; then
    (cd "$REPO" && timeout 180 "$PY" tools/make_random_model.py --out "$M" --tokenizer-from "$TOKSRC")
  else
    timeout 240 "$PY" "$HERE/make_model_torch.py" "$REPO" "$M" "$TOKSRC"
  fi
  note "model rc=$?"; SRCDIR=$M
else
  SRCDIR=$MODEL_SRC
fi
timeout 180 "${TERN[@]}" convert --model "$SRCDIR" --outfile "$G/BF16.gguf" --outtype bf16; note "convert rc=$?"
rm -rf "$M"  # the safetensors are no longer needed
pids=()
for q in q8_0 q4_0 q4_k_m; do
  timeout 240 "${TERN[@]}" quantize "$G/BF16.gguf" "$G/${q^^}.gguf" "$q" > "$R/quantize-$q.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; note "quantize pid $p rc=$?"; done
cat "$R"/quantize-*.log; ls -la "$G"; snap

# --- 2b. llama.cpp's CPU variant: GGML_BACKEND_DL loads the highest-scoring libggml-cpu-*.so this CPU reports
#     support for. A virtual CPU can report instructions it then refuses (AMX tiles without the kernel's
#     permission: SIGILL, rc 132, on the quantized files). Probe each file with a tiny run; on SIGILL set the
#     variant aside and probe again, so every pass below runs the same, best working variant.
for q in Q8_0 Q4_0 Q4_K_M BF16; do
  f=$G/$q.gguf
  [ -s "$f" ] || continue
  for try in 1 2 3; do
    (cd "$W/llama" && timeout 60 "${LB[@]}" -m "$f" -t "$TMAIN" -p 16 -n 4 -r 1 -o json > /dev/null 2> "$R/probe-$q.log")
    rc=$?
    v=$(grep -o "libggml-cpu-[A-Za-z0-9_]*\.so" "$R/probe-$q.log" | head -1)
    note "llama-bench probe $q ($v): rc=$rc"
    [ "$rc" = 132 ] && [ -n "$v" ] && [ -f "$W/llama/$v" ] || break
    mkdir -p "$W/llama-refused" && mv "$W/llama/$v" "$W/llama-refused/"
    echo "$v: SIGILL on $q.gguf (rc 132), set aside" | tee -a "$R/llama-variants.txt"
  done
done
grep -h -o "libggml-cpu-[A-Za-z0-9_]*\.so" "$R"/probe-*.log | sort | uniq -c | sed 's/^/llama.cpp variant used: /' \
  | tee -a "$R/llama-variants.txt"

# --- 3. alternating tern / llama-bench per file
run_pass() {
  local t=$1 q f
  for q in BF16 Q8_0 Q4_0 Q4_K_M; do
    f=$G/$q.gguf
    [ -s "$f" ] || { note "SKIP $q t$t: no $f"; continue; }
    note "tern $q t$t"
    timeout 180 ${PIN[@]+"${PIN[@]}"} "${TERN[@]}" bench pp-tg --model "$f" --device cpu -t "$t" -p "$PP" -n "$TG" \
      -r "$REPS" --cpu-kernels optimized --json-out "$R/tern-$q-t$t.json" > "$R/tern-$q-t$t.log" 2>&1
    note "rc=$?"; cat "$R/tern-$q-t$t.log"
    if [ "$q" = BF16 ]; then
      note "tern $q fast t$t"
      timeout 180 ${PIN[@]+"${PIN[@]}"} "${TERN[@]}" bench pp-tg --model "$f" --device cpu -t "$t" -p "$PP" -n "$TG" \
        -r "$REPS" --cpu-kernels fast --json-out "$R/tern-$q-fast-t$t.json" > "$R/tern-$q-fast-t$t.log" 2>&1
      note "rc=$?"; cat "$R/tern-$q-fast-t$t.log"
    fi
    note "llama-bench $q t$t"
    (cd "$W/llama" && timeout 180 ${PIN[@]+"${PIN[@]}"} "${LB[@]}" -m "$f" -t "$t" -p "$PP" -n "$TG" -r "$REPS" -o json \
      > "$R/llama-$q-t$t.json" 2> "$R/llama-$q-t$t.log")
    note "rc=$?"; grep -i -E "load_backend|error|fail" "$R/llama-$q-t$t.log" | head -5
    grep -E '"(n_prompt|n_gen|avg_ts|stddev_ts)"' "$R/llama-$q-t$t.json" | tr -d ' \n'; echo
    snap
  done
}
P0=$(el); run_pass "$TMAIN"; P1=$(el)
note "pass t$TMAIN took $((P1 - P0))s"
if [ "$TSECOND" -gt 0 ] && [ "$TSECOND" != "$TMAIN" ] && [ $(( P1 + (P1 - P0) * 9 / 5 )) -lt "$BUDGET" ]; then
  run_pass "$TSECOND"
else
  note "SKIP pass t$TSECOND (budget $BUDGET s)"
fi

# --- 3b. thread scaling (SCALING=1): pp512 / tg32 once at 1, 2, 4, ... TMAIN threads, tern's two kernel sets on
#     BF16 and llama.cpp on the same file, and the bf16 and q4_0 GEMMs alone (tern_cpu_linear_bench).
if [ "${SCALING:-0}" = 1 ]; then
  for t in 1 2 4 8 "$TMAIN"; do
    [ "$t" -le "$TMAIN" ] || continue
    for k in optimized fast; do
      timeout 120 ${PIN[@]+"${PIN[@]}"} "${TERN[@]}" bench pp-tg --model "$G/BF16.gguf" --device cpu -t "$t" -p "$PP" -n 32 \
        -r 1 --cpu-kernels "$k" --json-out "$R/scale-tern-$k-t$t.json" > /dev/null 2>&1
      note "scale tern $k t$t rc=$? $(grep -o '"\(pp\|tg\)_tokens_per_s": [0-9.]*' "$R/scale-tern-$k-t$t.json" | tr '\n' ' ')"
    done
    (cd "$W/llama" && timeout 120 ${PIN[@]+"${PIN[@]}"} "${LB[@]}" -m "$G/BF16.gguf" -t "$t" -p "$PP" -n 32 -r 1 -o json \
      > "$R/scale-llama-t$t.json" 2> /dev/null)
    note "scale llama t$t rc=$? $(grep -o '"avg_ts": [0-9.]*' "$R/scale-llama-t$t.json" | tr '\n' ' ')"
  done
  timeout 150 ${PIN[@]+"${PIN[@]}"} "${BWB[@]}" --threads "1,$TMAIN" --tokens 1,512 --dtypes bf16,q4_0 --seconds 0.5 \
    > "$R/scale-linear.txt" 2>&1
  note "linear bench rc=$?"; cat "$R/scale-linear.txt"; cp "$R/scale-linear.txt" "$OUT/scale-linear.txt"
  snap
fi

# --- 4. summary
"$PY" "$HERE/summarize.py" "$R" > "$R/summary.md" 2>&1 || python3 "$HERE/summarize.py" "$R" > "$R/summary.md" 2>&1
cat "$R/summary.md"; cp "$R/summary.md" "$OUT/summary.md"
note "done in $(el)s"
snap; cp "$R/run.log" "$OUT/run.log"
