"""bench/kernels/sass_regions.py on a made-up ncu SASS source page: stretches
cut at BAR.SYNC (default) or at each change of the executed count (--split
runs), ordered by stall samples or by instructions executed (--sort), the
executed opcode mix, one launch of several picked by --kernel, and bad input
refused with a message."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "bench" / "kernels" / "sass_regions.py"

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
          '"stall_long_sb","stall_wait"')


def section(name, rows):
    """A launch's section: its name row, the header, then (source, samples, executed) rows."""
    lines = [f'"Kernel Name","{name}",', HEADER]
    for k, (src, samples, executed) in enumerate(rows):
        lines.append(f'"0x{k * 16:x}","{src}","{samples}","{executed}","{samples}","0"')
    return lines


# A prologue run once per warp (IMAD-heavy, 100 warps), a loop body run 400 times that ends in a barrier,
# and an epilogue: by samples the loop leads, by executed instructions too, and --split runs keeps the
# prologue apart from the loop even without a barrier between them.
LAUNCH = [("IMAD R1, R2, R3, RZ", 50, 100), ("IMAD R4, R2, R3, RZ", 30, 100), ("LDG.E R5, [R6.64]", 5, 100),
          ("HMMA.16816.F32.BF16 R8, R4, R12, R8", 10, 400), ("FMUL R9, R9, R10", 20, 400),
          ("BAR.SYNC.DEFER_BLOCKING 0x0", 15, 400), ("STG.E [R6.64], R9", 2, 100)]


def run(tmp_path, lines, *args):
    path = tmp_path / "sass.csv"
    path.write_text("\n".join(lines) + "\n")
    return subprocess.run([sys.executable, str(TOOL), str(path), *args], capture_output=True, text=True,
                          timeout=60)


def stretches(out):
    """The table's rows: (samples %, executed, first, last)."""
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 4 and parts[0].endswith("%") and "-" in parts[3]:
            first, last = parts[3].split("-")
            rows.append((float(parts[0][:-1]), int(parts[1]), int(first), int(last)))
    return rows


def test_barriers_by_samples(tmp_path):
    r = run(tmp_path, section("k", LAUNCH))
    assert r.returncode == 0, r.stderr
    assert "7 instructions, 132 stall samples, 1600 instructions executed" in r.stdout
    # Cut after the BAR: instructions 0-5 (the prologue and the loop), then the store.
    assert stretches(r.stdout) == [(round(100 * 130 / 132, 1), 1500, 0, 5), (round(100 * 2 / 132, 1), 100, 6, 6)]
    assert "executed: HMMA 25.0%, FMUL 25.0%, BAR 25.0%, IMAD 12.5%" in r.stdout


def test_runs_by_executed(tmp_path):
    r = run(tmp_path, section("k", LAUNCH), "--split", "runs", "--sort", "executed")
    assert r.returncode == 0, r.stderr
    got = stretches(r.stdout)
    assert [(e, a, b) for _, e, a, b in got] == [(1200, 3, 5), (300, 0, 2), (100, 6, 6)]
    assert "IMAD:2 LDG:1" in r.stdout


def test_picks_a_launch(tmp_path):
    other = [("FFMA R1, R2, R3, R1", 7, 50)]
    lines = section("first", other) + section("second", LAUNCH)
    r = run(tmp_path, lines, "--kernel", "1")
    assert r.returncode == 0, r.stderr
    assert "launch 1 of 2: second" in r.stdout
    assert "1600 instructions executed" in r.stdout
    r = run(tmp_path, lines)
    assert "launch 0 of 2: first" in r.stdout and "50 instructions executed" in r.stdout


def test_refuses_bad_input(tmp_path):
    r = run(tmp_path, section("k", LAUNCH), "--kernel", "3")
    assert r.returncode != 0 and "has 1 profiled launch(es)" in r.stderr
    r = run(tmp_path, ['"Kernel Name","k",', '"not","a source page"'])
    assert r.returncode != 0 and "not ncu's SASS source page" in r.stderr
    r = run(tmp_path, section("k", LAUNCH), "--top", "0")
    assert r.returncode != 0 and "--top must be at least 1" in r.stderr
