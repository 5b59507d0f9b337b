"""bench/locust: the articles' load test. Its prompts are 50-500 Chinese
characters; a short headless run against the real server succeeds and
records the ttft and total rows; summarize.py writes (and on a second run
replaces) its section of a benchmarks page. Locust runs in a subprocess:
it monkey-patches the standard library with gevent when imported."""

import json
import subprocess
import sys

from conftest import ROOT

pytest_plugins = ["server_fixture"]

LOCUST = ROOT / "bench" / "locust"


def test_prompts_are_50_to_500_chinese_characters():
    code = ("import random, sys; sys.path.insert(0, sys.argv[1]); from locustfile import chinese_prompt, PUNCTUATION\n"
            "rng = random.Random(3); ps = [chinese_prompt(rng) for _ in range(400)]\n"
            "print(min(map(len, ps)), max(map(len, ps)), "
            "all('\\u4e00' <= c <= '\\u9fff' or c in PUNCTUATION + '？' for p in ps for c in p))")
    out = subprocess.run([sys.executable, "-c", code, str(LOCUST)], capture_output=True, text=True, timeout=60)
    low, high, chinese = out.stdout.split()
    assert 50 <= int(low) < 60 and 490 < int(high) <= 500 and chinese == "True", out.stderr


def test_short_headless_run_and_its_section(server, tmp_path):
    summary = tmp_path / "summary.json"
    env = {"LOCUST_SUMMARY_JSON": str(summary), "LOCUST_MAX_TOKENS": "8", "LOCUST_MIN_WAIT": "0",
           "LOCUST_MAX_WAIT": "0.2", "PATH": "/usr/bin:/bin"}
    args = ["-f", str(LOCUST / "locustfile.py"), "--host", server.url, "--headless", "-u", "4", "-r", "4", "-t", "4s",
            "--stop-timeout", "30", "--csv", str(tmp_path / "run"), "--only-summary"]
    run = subprocess.run([sys.executable, "-m", "locust", *args], capture_output=True, text=True, timeout=120, env=env,
                         cwd=tmp_path)
    rows = json.loads(summary.read_text())["rows"]
    chat = rows["POST /v1/chat/completions"]
    assert chat["requests"] >= 4 and chat["failures"] == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert rows["SSE total"]["requests"] == chat["requests"] and rows["SSE ttft"]["requests"] == chat["requests"]
    assert rows["SSE ttft"]["p50_ms"] <= rows["SSE total"]["p50_ms"]
    assert (tmp_path / "run_stats.csv").exists()

    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nearlier text\n")
    for title in ("first", "second"):
        subprocess.run([sys.executable, str(LOCUST / "summarize.py"), "--doc", str(doc), "--label", "test",
                        "--title", title, "--notes", "notes", f"4 users={summary}"], check=True, timeout=60,
                       capture_output=True)
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nearlier text\n") and text.count("<!-- locust:test -->") == 1
    assert "### second" in text and "### first" not in text
    assert f"| 4 users | {chat['requests']:,} | 100.00% |" in text
