"""Shared fixtures: the tern binary under test and the tiny test models."""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


@pytest.fixture(scope="session")
def tern_bin():
    path = os.environ.get("TERN_BIN", str(ROOT / "build" / "bin" / "tern"))
    if not os.path.exists(path):
        pytest.fail(f"tern binary not found at {path}; build first (make build) or set TERN_BIN")
    return path


@pytest.fixture(scope="session")
def tiny_model():
    return DATA / "ernie-tiny"


@pytest.fixture(scope="session")
def tiny_golden(tiny_model):
    with open(tiny_model / "golden.json", encoding="utf-8") as f:
        return json.load(f)


def run_tern(tern_bin, *args, timeout=120):
    return subprocess.run([tern_bin, *map(str, args)], capture_output=True, timeout=timeout)


def auto_cpu_kernels():
    """The kernel set `--cpu-kernels auto` picks on this machine: fast on AMD CPUs with AVX512_BF16,
    optimized elsewhere (backend/cpu/kernel_set.cpp, auto_kernel_set)."""
    vendor, flags = "", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "vendor_id" and not vendor:
                vendor = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    return "fast" if vendor == "AuthenticAMD" and "avx512_bf16" in flags else "optimized"
