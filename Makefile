# tern: the entry points. `make run` builds and serves the default model;
# `make test` builds and runs every test. Both install what they need first.

BUILD_DIR ?= build
JOBS ?= $(shell nproc)
MODEL ?= tests/data/ernie-tiny
PROMPT ?= 你好，请介绍一下你自己。
CMAKE_FLAGS ?=

TERN := $(BUILD_DIR)/bin/tern
PY := .venv/bin/python

.PHONY: all deps configure build test test-unit test-py run bench random-model clean

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
	@TERN_BIN=$(abspath $(TERN)) $(PY) -m pytest -q tests/e2e

test: test-unit test-py

run: build
	@$(TERN) generate --model $(MODEL) --chat --prompt "$(PROMPT)" --max-tokens 64

# Full-size ERNIE-4.5-0.3B-shaped checkpoint with random weights, for benchmarks.
random-model: deps
	@$(PY) tools/make_random_model.py --out models/ernie-4.5-0.3b-random --tokenizer-from $(MODEL)

bench: build random-model
	@$(TERN) bench --model models/ernie-4.5-0.3b-random

clean:
	rm -rf $(BUILD_DIR)
