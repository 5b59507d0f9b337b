"""bench/kernels/ab_gpu_bench.py against stand-in tern_gpu_bench binaries
(scripts that print the closing table tern_gpu_bench prints): the runs
alternate A, B, A, B; each side's range and the ratio of the medians come out
per configuration and batch; --config-per-run gives each configuration a
process of its own; a failing run is named and fails the exit status; bad
arguments are refused."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "bench" / "kernels" / "ab_gpu_bench.py"

# Prints tern_gpu_bench's table: decode = base * batch, prefill = 10 * base, where base is the binary's
# first argument-free setting (BASE), plus 1 per earlier run of this binary (a counter file), and
# appends its name and arguments to the order file.
FAKE = textwrap.dedent('''\
    #!/usr/bin/env python3
    import os, pathlib, sys
    name = pathlib.Path(sys.argv[0]).name
    order = pathlib.Path(os.environ["AB_ORDER"])
    with order.open("a") as f:
        f.write(name + " " + " ".join(sys.argv[1:]) + "\\n")
    runs = sum(1 for line in order.read_text().splitlines() if line.split()[0] == name) - 1
    base = float(os.environ["BASE_" + name.upper()]) + runs
    if os.environ.get("FAIL_" + name.upper()):
        print("create failed: out of memory")
        sys.exit(3)
    configs = sys.argv[sys.argv.index("--configs") + 1].split(",") if "--configs" in sys.argv else ["graphs"]
    print("model /tmp/m: host load 0.10 s")
    print("")
    print("| config | batch | decode tok/s | ms/step | logits-to-host tok/s | prefill tok/s (256-token prompts) |")
    print("|---|---|---|---|---|---|")
    for config in configs:
        for batch in (8, 64):
            print(f"| {config} | {batch} | {base * batch:.0f} | 1.000 | {base:.0f} | {10 * base:.0f} |")
''')


def make_fakes(tmp_path):
    paths = []
    for name in ("olda", "newb"):
        path = tmp_path / name
        path.write_text(FAKE)
        path.chmod(0o755)
        paths.append(path)
    return paths


def run_tool(args, env):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60, env=env)


def test_alternates_and_compares_medians(tmp_path):
    a, b = make_fakes(tmp_path)
    order = tmp_path / "order.txt"
    env = dict(os.environ, AB_ORDER=str(order), BASE_OLDA="100", BASE_NEWB="200")
    out_json = tmp_path / "ab.json"
    done = run_tool(["--a", str(a), "--b", str(b), "--rounds", "2", "--log-dir", str(tmp_path / "logs"),
                     "--json", str(out_json), "--b-args", "--configs graphs,regkv", "--",
                     "--model", "/tmp/m", "--batch", "8,64"], env)
    assert done.returncode == 0, done.stderr
    # A, B, A, B, with the common arguments first and B's own after them.
    calls = order.read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["olda", "newb", "olda", "newb"]
    assert calls[1] == "newb --model /tmp/m --batch 8,64 --configs graphs,regkv"
    assert calls[0] == "olda --model /tmp/m --batch 8,64"
    # A's runs: bases 100, 101; B's: 200, 201. Batch 8 decode: A 800-808, B 1,600-1,608, ratio 1604 / 804.
    table = done.stdout
    assert "| graphs | 8 | 800-808 | 1,600-1,608 | 1.995 | 1,000-1,010 | 2,000-2,010 | 1.995 |" in table
    assert "| graphs | 64 | 6,400-6,464 | 12,800-12,864 | 1.995 |" in table
    # A configuration only B ran: A's side is empty.
    assert "| regkv | 8 | - | 1,600-1,608 | - | - | 2,000-2,010 | - |" in table
    assert (tmp_path / "logs" / "a_1.log").exists() and (tmp_path / "logs" / "b_2.log").exists()
    saved = json.loads(out_json.read_text())
    assert saved["errors"] == []
    assert len(saved["runs"]["a"]) == 2 and len(saved["runs"]["b"]) == 2
    assert saved["summary"][0]["a"]["decode"] == [800.0, 808.0]


def test_config_per_run_starts_a_process_for_each_configuration(tmp_path):
    a, b = make_fakes(tmp_path)
    order = tmp_path / "order.txt"
    env = dict(os.environ, AB_ORDER=str(order), BASE_OLDA="100", BASE_NEWB="200")
    done = run_tool(["--a", str(a), "--b", str(b), "--rounds", "1", "--config-per-run", "--log-dir", str(tmp_path),
                     "--a-args", "--configs graphs", "--b-args=--configs=graphs,regkv", "--",
                     "--model", "/tmp/m", "--configs", "ignored", "--batch", "8,64"], env)
    assert done.returncode == 0, done.stderr
    # Each side's last --configs wins; each configuration alone, after the other arguments.
    assert order.read_text().splitlines() == [
        "olda --model /tmp/m --batch 8,64 --configs graphs",
        "newb --model /tmp/m --batch 8,64 --configs graphs",
        "newb --model /tmp/m --batch 8,64 --configs regkv",
    ]
    assert "B run 1 regkv: 2 rows" in done.stdout
    assert (tmp_path / "b_1_regkv.log").exists()
    # B's runs: bases 200 (graphs), 201 (regkv); both in one round's rows.
    assert "| graphs | 8 | 800 | 1,600 | 2.000 |" in done.stdout
    assert "| regkv | 8 | - | 1,608 | - |" in done.stdout


def test_a_failing_run_is_named_and_fails_the_exit_status(tmp_path):
    a, b = make_fakes(tmp_path)
    env = dict(os.environ, AB_ORDER=str(tmp_path / "order.txt"), BASE_OLDA="100", BASE_NEWB="200", FAIL_NEWB="1")
    done = run_tool(["--a", str(a), "--b", str(b), "--rounds", "1", "--log-dir", str(tmp_path), "--",
                     "--model", "/tmp/m"], env)
    assert done.returncode == 1
    assert "B run 1: exit status 3" in done.stderr
    assert "| graphs | 8 | 800 | - | - | 1,000 | - | - |" in done.stdout
    assert "create failed: out of memory" in (tmp_path / "b_1.log").read_text()


def test_bad_arguments_are_refused(tmp_path):
    a, _ = make_fakes(tmp_path)
    for args, words in ((["--a", str(a), "--b", str(tmp_path / "missing")], "not an executable file"),
                        (["--a", str(a), "--b", str(a), "--rounds", "0"], "--rounds 0"),
                        (["--a", str(a), "--b", str(a), "--timeout", "-1"], "--timeout -1.0")):
        done = run_tool(args, dict(os.environ))
        assert done.returncode == 2, args
        assert words in done.stderr, (args, done.stderr)
