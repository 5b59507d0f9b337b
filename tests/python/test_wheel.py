"""`pip wheel .` (scikit-build-core over this CMake project) from the already built tree: the wheel holds the
package and libtern, installs into a clean folder, and `import tern` from there generates the HF goldens'
greedy tokens with no TERN_LIBRARY set and python/ off the path. The build folder is TERN_BIN's, so only
libtern's install step runs (seconds); `pip install .` from scratch is the same build in a fresh folder."""

import json
import os
import pathlib
import re
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
TERN_BIN = os.environ.get("TERN_BIN", str(ROOT / "build" / "bin" / "tern"))
BUILD_DIR = pathlib.Path(TERN_BIN).resolve().parents[1]


def test_the_wheel_installs_and_generates(tmp_path):
    cache = (BUILD_DIR / "CMakeCache.txt").read_text()
    generator = re.search(r"^CMAKE_GENERATOR:INTERNAL=(.*)$", cache, re.M).group(1)
    env = dict(os.environ, CMAKE_GENERATOR=generator)
    env.pop("TERN_LIBRARY", None)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-build-isolation", "--no-deps",
                        f"-Cbuild-dir={BUILD_DIR}", "-w", str(tmp_path / "dist")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("tern-*-py3-none-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"tern/__init__.py", "tern/llm.py", "tern/libtern.so", "tern/py.typed"} <= names
    assert not any(n.endswith((".h", ".a", ".pc")) or n.startswith("bin/") for n in names)

    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    golden = json.loads((ROOT / "tests" / "data" / "ernie-tiny" / "golden.json").read_text(encoding="utf-8"))
    prompt = golden["prompts"][0]
    program = (
        "import json, sys, tern\n"
        "from tern import LLM, SamplingParams\n"
        f"llm = LLM(model={str(ROOT / 'tests' / 'data' / 'ernie-tiny')!r}, device='cpu', kv_cache_memory='16MiB')\n"
        f"out = llm.generate([{prompt['text']!r}], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))\n"
        "print(json.dumps({'file': tern.__file__, 'ids': out[0].outputs[0].token_ids}))\n")
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                       env=dict(env, PYTHONPATH=str(site)))
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout)
    assert pathlib.Path(result["file"]).is_relative_to(site)
    assert result["ids"] == prompt["greedy"]
