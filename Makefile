# tern: the entry points. `make run` builds and serves the default model;
# `make test` builds and runs every test. Both install what they need first.

BUILD_DIR ?= build
JOBS ?= $(shell nproc)
MODEL ?= models/ernie-demo
PROMPT ?= 你好，请介绍一下你自己。
CMAKE_FLAGS ?=

TERN := $(BUILD_DIR)/bin/tern
PY := .venv/bin/python

.PHONY: generate all deps configure build test test-unit test-py test-fuzz fuzz fuzz-build tsan run bench bench-cpu \
  random-model clean wheel reliability soak compat test-compat

all: build

deps:
	@scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test-unit: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

test-py: build
	@TERN_BIN=$(abspath $(TERN)) $(PY) -m pytest -q tests/e2e tests/browser tests/layout tests/python tests/reliability

test: test-unit test-py test-fuzz

# The Python package's wheel (dist/) from the tree `make build` built: scikit-build-core reuses
# $(BUILD_DIR), so only libtern's install step runs. `pip install .` builds from scratch instead.
wheel: build
	@CMAKE_GENERATOR="$$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' $(BUILD_DIR)/CMakeCache.txt)" \
	  $(PY) -m pip wheel . --no-build-isolation --no-deps -Cbuild-dir=$(BUILD_DIR) -w dist

# Reliability (docs/reliability.md) at full counts against the real `tern serve` with the tiny model:
# 5,000 hostile requests, 1,000 dropped streams, 400 clients past --max-queued-requests, SIGTERM
# under load, a 5-minute soak (TERN_SOAK_SECONDS). `make test` runs the short versions.
reliability: build
	@TERN_BIN=$(abspath $(TERN)) TERN_RELIABILITY_FULL=1 $(PY) -m pytest -q -s tests/reliability

# Soak: sustained mixed load on `tern serve --device cpu` for DURATION (600, 90s, 30m, 1h), then RSS
# growth and leaked KV blocks; fails past 50 MB of growth or any leaked block. SOAK_MODEL: a model folder;
# SOAK_CLIENTS: client threads (6); SOAK_FLAGS: tern serve's flags instead of the CPU ones (e.g. --device cuda).
DURATION ?= 30m
SOAK_MODEL ?=
SOAK_CLIENTS ?= 6
SOAK_FLAGS ?=
soak: build
	@TERN_BIN=$(abspath $(TERN)) $(PY) tests/reliability/soak.py --duration $(DURATION) --clients $(SOAK_CLIENTS) \
	  $(if $(SOAK_MODEL),--model $(SOAK_MODEL)) $(if $(SOAK_FLAGS),--server-flags "$(SOAK_FLAGS)") \
	  --json-out $(BUILD_DIR)/soak.json

# Fuzzing: the untrusted-input parsers built with clang + libFuzzer (ASan and
# UBSan) in their own build dir, without CUDA or the other modules, run by
# tests/fuzz/run_fuzzers.sh: each fuzzer on a scratch copy of
# tests/fuzz/corpus/<fuzzer> (new inputs never land in the repo), one after the
# other; a crash, leak, timeout or broken invariant fails the target and leaves
# the input in $(FUZZ_BUILD_DIR)/artifacts/.
#   make fuzz:      FUZZ_RUNS executions per fuzzer (10 million), capped at
#                   FUZZ_MAX_SECONDS each, shared among FUZZ_JOBS independent
#                   processes per fuzzer (own seeds; 1 by default); the figures
#                   land in $(FUZZ_BUILD_DIR)/fuzz-summary.txt.
#   make test-fuzz: FUZZ_TEST_SECONDS per fuzzer (part of `make test`).
# FUZZERS=fuzz_http picks some. docs/reliability.md records the long runs.
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_RUNS ?= 10000000
FUZZ_MAX_SECONDS ?= 7200
FUZZ_TEST_SECONDS ?= 10
FUZZ_JOBS ?= 1
FUZZ_CC ?= $(if $(shell command -v clang),clang,clang-14)
FUZZ_CXX ?= $(if $(shell command -v clang++),clang++,clang++-14)
FUZZERS ?= $(basename $(notdir $(wildcard tests/fuzz/fuzz_*.cpp)))

fuzz-build: deps
	@cmake -S . -B $(FUZZ_BUILD_DIR) -DCMAKE_C_COMPILER=$(FUZZ_CC) -DCMAKE_CXX_COMPILER=$(FUZZ_CXX) \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g" \
	  -DTERN_BUILD_FUZZERS=ON -DTERN_ENABLE_CUDA=OFF -DTERN_BUILD_TESTS=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target $(FUZZERS)


fuzz: fuzz-build
	@tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD_DIR) $(FUZZ_RUNS) $(FUZZ_MAX_SECONDS) $(FUZZ_JOBS) $(FUZZERS)

test-fuzz: fuzz-build
	@tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD_DIR) -1 $(FUZZ_TEST_SECONDS) 1 $(FUZZERS)

# ThreadSanitizer: the engine (engine_tests: the engine thread, EngineClient and
# its callers), the HTTP layer (server_tests) and the real servers under load
# from the e2e tests (tern_http_echo: the transport with its io threads,
# disconnects and shutdown; tern serve: routes, engine thread and streams), all
# built with -fsanitize=thread in $(TSAN_BUILD_DIR), without CUDA. Any report
# fails the target; reports land in $(TSAN_BUILD_DIR)/tsan-reports/. Too slow
# for `make test` on 2 cores (a full build of its own); docs/reliability.md
# records the last run.
TSAN_BUILD_DIR ?= build-tsan
TSAN_PYTESTS ?= tests/e2e/test_http_transport.py tests/e2e/test_server_openai.py tests/e2e/test_server_tgi.py
# Timing-bound under TSan's slowdown (the server cannot fill a stalled reader's
# socket buffers within the test's 5 s), not a race.
TSAN_DESELECT ?= --deselect tests/e2e/test_http_transport.py::test_client_that_stops_reading_is_dropped

tsan: deps
	@cmake -S . -B $(TSAN_BUILD_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
	  -DTERN_SANITIZE_THREAD=ON -DTERN_ENABLE_CUDA=OFF -DTERN_BUILD_EXAMPLES=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(TSAN_BUILD_DIR) -j $(JOBS) --target engine_tests server_tests tern tern_http_echo
	@rm -rf $(TSAN_BUILD_DIR)/tsan-reports && mkdir -p $(TSAN_BUILD_DIR)/tsan-reports
	@export TSAN_OPTIONS="second_deadlock_stack=1 log_path=$(abspath $(TSAN_BUILD_DIR))/tsan-reports/report"; \
	  $(TSAN_BUILD_DIR)/bin/engine_tests --gtest_brief=1 && $(TSAN_BUILD_DIR)/bin/server_tests --gtest_brief=1 && \
	  TERN_BIN=$(abspath $(TSAN_BUILD_DIR))/bin/tern TERN_HTTP_ECHO=$(abspath $(TSAN_BUILD_DIR))/bin/tern_http_echo \
	    $(PY) -m pytest -q $(TSAN_PYTESTS) $(TSAN_DESELECT); status=$$?; \
	  if ls $(TSAN_BUILD_DIR)/tsan-reports/report.* >/dev/null 2>&1; then \
	    cat $(TSAN_BUILD_DIR)/tsan-reports/report.*; echo "tsan: data races or other reports above"; exit 1; fi; \
	  [ $$status -eq 0 ] && echo "tsan: clean"

# Serves MODEL (the small demo model unless given) with the OpenAI/vLLM/TGI APIs and
# the chat page on http://HOST:PORT/.
HOST ?= 127.0.0.1
PORT ?= 8000
run: build
	@echo "tern: serving $(MODEL); the chat page is on http://$(HOST):$(PORT)/ (Ctrl-C stops)"
	@$(TERN) serve --model $(MODEL) --host $(HOST) --port $(PORT)

# One prompt through the engine, printed as it is generated.
generate: build
	@$(TERN) generate --model $(MODEL) --chat --prompt "$(PROMPT)" --max-tokens 64

# Full-size ERNIE-4.5-0.3B-shaped checkpoint with random weights, for benchmarks.
random-model: deps
	@$(PY) tools/make_random_model.py --out models/ernie-4.5-0.3b-random --tokenizer-from tests/data/ernie-tiny

# CPU smoke benchmark on the random full-size model, under 3 minutes on 2 cores:
# the engine alone, then `tern serve` through bench/serving/serve_bench.py (single and
# conc-8 at small counts). JSON and markdown land in bench/results/; the GPU
# comparison with HF transformers is bench/serving/run_gpu_bench.sh.
bench: build random-model
	@mkdir -p bench/results && $(PY) bench/serving/sp_vocab.py pad models/ernie-4.5-0.3b-random
	@$(TERN) bench offline --model models/ernie-4.5-0.3b-random --num-requests 8 --input-min 32 --input-max 128 \
	  --output-min 16 --output-max 32 --json-out bench/results/cpu-engine-offline.json
	@$(PY) bench/serving/serve_bench.py --label cpu-serve --model-dir models/ernie-4.5-0.3b-random \
	  --launch "$(TERN) serve --model models/ernie-4.5-0.3b-random --host 127.0.0.1 --port 0" \
	  --scenarios single:3,conc-8:8 --single-input 128 --output-len 32 --conc-input 32:128 --time-budget 120

# tern against llama.cpp on the CPU, llama-bench's pp512 / tg128 at 2 threads on the
# random full-size model: builds llama.cpp from llama-cpp-python's source package into
# LLAMA_DIR (outside the repo), converts and quantizes the weights (BF16, Q8_0, Q4_0,
# Q4_K_M), all cached; then alternating passes of llama-bench and `tern bench pp-tg`.
# JSON, logs and the markdown table land in bench/results/cpu-llama/ (about 20 minutes
# on 2 cores once built; the first run also builds llama.cpp and installs torch).
bench-cpu: configure
	@[ -s models/ernie-4.5-0.3b-random/model.safetensors ] || $(MAKE) --no-print-directory random-model
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target tern tern_cpu_linear_bench
	@TERN_BIN=$(TERN) BW_BIN=$(BUILD_DIR)/bin/tern_cpu_linear_bench PYTHON=$(PY) \
	  bench/serving/baselines/llama_cpp_cpu_bench.sh bench/results/cpu-llama

# tern and llama.cpp on each other's GGUF files (tests/compat, docs/compat.md): llama.cpp's
# converter and llama-quantize against tern convert / tern quantize on the tiny models, every file
# loaded in both tools, greedy tokens compared, files compared byte by byte, and each quantization's
# KL divergence against bf16 from tern perplexity beside llama-perplexity's; rewrites docs/compat.md.
# Builds llama.cpp's CPU tools and the converter's venv (torch) first, cached in LLAMA_DIR outside
# the repo: the first run takes 20-30 minutes more on 2 cores, later runs about 4 minutes. Not in
# `make test` for that reason; tests/e2e/test_gguf.py checks tern's files with gguf-py there.
compat: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target tern
	@TERN_BIN=$(TERN) PYTHON=$(PY) tests/compat/run.sh

# The same, under the name the test targets share.
test-compat: compat

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_BUILD_DIR) $(TSAN_BUILD_DIR)

# GPU tests (tests/cuda): each CUDA kernel against the CPU reference kernels,
# the model on the GPU against the HF goldens and the CPU engine path. Needs
# a CUDA GPU (run on the GPU machine); CI only compiles them.
.PHONY: test-gpu
test-gpu: build
	@test -x $(BUILD_DIR)/bin/gpu_tests || { echo "test-gpu: gpu_tests not built (CMake found no nvcc)"; exit 1; }
	@$(BUILD_DIR)/bin/gpu_tests
