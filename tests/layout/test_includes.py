"""The module map of docs/architecture.md, checked: every project include in
src/ goes to the module itself or to one the map allows, so no file includes
upward (backend/ never includes model/; engine/ never includes model/,
backend/ or runners/; server/http/ never includes server/api/), and every
included project header exists."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
# The public C API (include/tern/tern.h): its implementation (capi) includes it, no other module does.
INCLUDE_DIR = ROOT / "include"

# Who may include whom (besides itself). Keep in step with docs/architecture.md.
ALLOWED = {
    "base": set(),
    "formats": {"base"},
    "jinja": {"base"},
    "tokenizer": {"base", "formats"},
    "chat": {"base", "jinja", "tokenizer"},
    "kv": {"base"},
    "backend/cpu": {"base", "formats"},
    "backend/cuda": {"base", "formats"},
    "model": {"base", "formats", "backend/cpu", "backend/cuda"},
    "engine": {"base", "kv", "tokenizer"},
    "runners": {"base", "formats", "kv", "tokenizer", "engine", "model"},
    "setup": {"base", "formats", "tokenizer", "kv", "backend/cpu", "backend/cuda", "model", "engine", "runners", "hub"},
    "capi": {"base", "formats", "jinja", "tokenizer", "chat", "kv", "backend/cpu", "backend/cuda", "model", "engine",
             "runners", "setup", "include/tern"},
    "server/http": {"base"},
    "hub": {"base"},
    "server/api": {"base", "formats", "tokenizer", "chat", "engine", "model", "server/http"},
    "cli": {"base", "formats", "jinja", "tokenizer", "chat", "kv", "backend/cpu", "backend/cuda", "model", "engine",
            "runners", "setup", "server/http", "server/api", "hub"},
}
# Headers the build writes (into the build folder), not part of any module.
GENERATED = {"tern_git_commit.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = (".h", ".hpp", ".cpp", ".cu", ".cuh")


def module_of(path: str) -> str:
    parts = path.split("/")
    if parts[0] == "tern":
        return "include/tern"
    return "/".join(parts[:2]) if parts[0] in ("backend", "server") else parts[0]


def project_includes():
    for f in sorted(SRC.rglob("*")):
        if f.suffix in SOURCES:
            rel = f.relative_to(SRC).as_posix()
            for header in INCLUDE.findall(f.read_text(encoding="utf-8")):
                if header not in GENERATED:
                    yield rel, header


def test_every_source_file_belongs_to_a_known_module():
    unknown = {module_of(f.relative_to(SRC).as_posix()) for f in SRC.rglob("*") if f.suffix in SOURCES} - set(ALLOWED)
    assert not unknown, f"modules missing from the map: {sorted(unknown)}"


def upward(includes):
    bad = []
    for rel, header in includes:
        here, there = module_of(rel), module_of(header)
        if there != here and there not in ALLOWED[here]:
            bad.append(f"src/{rel} includes {header} ({here} may not use {there})")
    return bad


def test_no_module_includes_upward():
    bad = upward(project_includes())
    assert not bad, "\n".join(bad)


def test_every_project_include_exists():
    missing = []
    for rel, header in project_includes():
        if not any(p.exists() for p in (SRC / header, (SRC / rel).parent / header, INCLUDE_DIR / header)):
            missing.append(f"src/{rel} includes {header}, which does not exist")
    assert not missing, "\n".join(missing)


def test_the_checker_flags_upward_includes():
    # A check that cannot fail checks nothing: the seams the map exists for.
    assert upward([("engine/engine.cpp", "model/model_config.h"), ("engine/runner.h", "runners/cpu_runner.h"),
                   ("backend/cuda/gemv.cu", "model/ernie4_5/cuda/device_model.h"),
                   ("server/http/sse.cpp", "server/api/metrics.h"), ("jinja/value.h", "tokenizer/tokenizer.h")]) != []
    assert len(upward([("engine/engine.cpp", "model/model_config.h"), ("backend/cpu/a.cpp", "model/x.h")])) == 2
    assert upward([("engine/engine.cpp", "tern/tern.h"), ("setup/engine_setup.cpp", "chat/chat_template.h"),
                   ("capi/tern_api.cpp", "server/api/metrics.h")]) != []
    assert len(upward([("engine/engine.cpp", "tern/tern.h"), ("setup/engine_setup.cpp", "chat/chat_template.h"),
                       ("capi/tern_api.cpp", "server/api/metrics.h")])) == 3
    assert upward([("capi/tern_api.cpp", "tern/tern.h"), ("capi/model_core.h", "setup/engine_setup.h"),
                   ("cli/engine_setup.h", "setup/engine_setup.h")]) == []
    assert upward([("runners/cpu_runner.cpp", "model/ernie4_5/ernie4_5_model.h"),
                   ("server/api/sse_user.cpp", "server/http/sse.h")]) == []
