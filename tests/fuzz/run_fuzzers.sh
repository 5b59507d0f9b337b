#!/usr/bin/env bash
# Runs libFuzzer targets built by `make fuzz-build`, one target after the other,
# each until RUNS executions (-1: no count) or SECONDS, whichever comes first;
# fails if any target did. `make fuzz` and `make test-fuzz` call it.
#
#   tests/fuzz/run_fuzzers.sh BUILD_DIR RUNS SECONDS JOBS FUZZER...
#
# JOBS > 1 runs that many independent processes per target, each with its own
# seed (1001, 1002, ...), its own scratch copy of the seed corpus and RUNS/JOBS
# executions, all capped at SECONDS; the executions are summed. Independent
# processes do not share what they find, so their sum is a lower bar than one
# process running as many, but a 16-core host does 10 million in minutes.
#
# Each process works on a copy of tests/fuzz/corpus/<target> (new inputs never
# land in the repo), in RAM where possible (fuzz_tokenizer_config writes files
# per input). A crash, leak, timeout or broken invariant leaves its input in
# BUILD_DIR/artifacts/. One summary line per target goes to the terminal and to
# BUILD_DIR/fuzz-summary.txt.
set -u
if [ $# -lt 5 ]; then
  echo "usage: $0 BUILD_DIR RUNS SECONDS JOBS FUZZER..." >&2
  exit 2
fi
build=$1 runs=$2 seconds=$3 jobs=$4
shift 4
[ "$jobs" -ge 1 ] 2>/dev/null || { echo "fuzz: JOBS must be a positive integer, not '$jobs'" >&2; exit 2; }
scratch=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
trap 'rm -rf "$scratch"' EXIT
artifacts=$(cd "$build" && pwd)/artifacts
summary=$build/fuzz-summary.txt
mkdir -p "$artifacts" && : >"$summary"
export PATH="/usr/lib/llvm-14/bin:$PATH"  # llvm-symbolizer for readable stacks
per_job=$runs
[ "$runs" -lt 0 ] || per_job=$(( (runs + jobs - 1) / jobs ))
failed=""
for f in "$@"; do
  if ! ls tests/fuzz/corpus/"$f"/* >/dev/null 2>&1; then
    echo "fuzz: $f has no seeds in tests/fuzz/corpus/$f"
    failed="$failed $f"
    continue
  fi
  dict=()
  [ ! -f "tests/fuzz/$f.dict" ] || dict=("-dict=tests/fuzz/$f.dict")
  seed=()
  start=$(date +%s)
  pids=()
  for j in $(seq 1 "$jobs"); do
    d="$scratch/$f-$j"
    mkdir -p "$d/corpus" && cp tests/fuzz/corpus/"$f"/* "$d/corpus/"
    [ "$jobs" -eq 1 ] || seed=("-seed=$((1000 + j))")
    TMPDIR="$d" "$build/bin/$f" "${dict[@]}" "${seed[@]}" -runs="$per_job" -max_total_time="$seconds" -timeout=25 \
      -print_final_stats=1 -artifact_prefix="$artifacts/$f-" "$d/corpus" >"$d/log" 2>&1 &
    pids+=($!)
  done
  bad=0
  for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
  secs=$(( $(date +%s) - start ))
  total=0 corpus=0 rss=0
  for j in $(seq 1 "$jobs"); do
    d="$scratch/$f-$j"
    n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$d/log")
    total=$((total + ${n:-0}))
    corpus=$((corpus + $(ls "$d/corpus" | wc -l)))
    r=$(sed -n 's/^stat::peak_rss_mb: *//p' "$d/log")
    [ "${r:-0}" -le "$rss" ] || rss=$r
  done
  if [ "$bad" -eq 0 ]; then
    line="fuzz: $f ok, $total runs in $secs s ($(( total / (secs > 0 ? secs : 1) )) exec/s)"
    [ "$jobs" -eq 1 ] || line="$line by $jobs processes"
    line="$line, corpus $corpus, peak RSS $rss MB"
    echo "$line"
    echo "$line" >>"$summary"
  else
    for j in $(seq 1 "$jobs"); do
      grep -q "ERROR\|deadly\|Timeout\|leak" "$scratch/$f-$j/log" && tail -n 40 "$scratch/$f-$j/log"
    done
    failed="$failed $f"
    echo "fuzz: $f FAILED ($bad of $jobs processes)" >>"$summary"
  fi
done
[ -z "$failed" ] || { echo "fuzz: FAILED:$failed (inputs in $artifacts/)"; exit 1; }
