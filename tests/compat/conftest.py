"""Fixtures of the llama.cpp round-trip tests: the tools (tern and llama.cpp's
binaries and converter, from the environment `make compat` sets up) and a
results store that every test adds its findings to; at the end of the session
it is written to COMPAT_DIR/results.json, which tests/compat/report.py turns
into docs/compat.md."""

import json
import platform
import subprocess
import time

import pytest

from compat_tools import ROOT, Tools

RESULTS = {"greedy": [], "loads": [], "identity": [], "kl": [], "tokens": []}


@pytest.fixture(scope="session")
def tools():
    t = Tools()
    missing = t.missing()
    if missing:
        pytest.fail(f"not set or not found: {', '.join(missing)} (make compat sets them up)")
    return t


@pytest.fixture(scope="session")
def results():
    return RESULTS


def pytest_sessionstart(session):
    RESULTS["started"] = time.time()


def pytest_sessionfinish(session, exitstatus):
    t = Tools()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    llama_version = ""
    if t.llama_src is not None:
        llama_version = t.llama_src.parent.parent.name  # llama_cpp_python-X.Y.Z
    RESULTS.update({
        "commit": commit + ("-dirty" if dirty else ""),
        "llama_cpp": llama_version,
        "machine": f"{platform.machine()}, {_cpu_name()}, {_cores()} cores",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": round(time.time() - RESULTS.get("started", time.time())),
        "exitstatus": int(exitstatus),
    })
    (t.work / "results.json").write_text(json.dumps(RESULTS, indent=1, ensure_ascii=False))


def _cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _cores():
    import os
    return os.cpu_count()
