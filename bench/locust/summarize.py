"""Turns the figures of one or more locust runs (the JSON that
bench/locust/locustfile.py writes to LOCUST_SUMMARY_JSON) into a markdown table and writes it into a section of docs/benchmarks.md
between `<!-- locust:LABEL -->` and `<!-- /locust:LABEL -->` (the section is
added at the end the first time).

    python bench/locust/summarize.py --doc docs/benchmarks.md --label cpu-tiny \
        --title "..." --notes "..." RUN_NAME=SUMMARY_JSON [RUN_NAME=SUMMARY_JSON ...]
"""

import argparse
import json
import pathlib
import re
import textwrap


def read_summary(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)["rows"]


def ms(value):
    return f"{value:,.0f}" if value else "-"


def run_row(name, rows):
    chat = rows["POST /v1/chat/completions"]
    total = rows.get("SSE total", {})
    ttft = rows.get("SSE ttft", {})
    requests, failures = chat["requests"], chat["failures"]
    success = 100.0 * (requests - failures) / requests if requests else 0.0
    return (f"| {name} | {requests:,} | {success:.2f}% | {chat['qps']:.2f} | "
            f"{ms(total.get('p50_ms'))} | {ms(total.get('p95_ms'))} | {ms(total.get('p99_ms'))} | "
            f"{ms(ttft.get('p50_ms'))} | {ms(ttft.get('p95_ms'))} | {ms(ttft.get('p99_ms'))} |")


def section(label, title, notes, runs):
    lines = [f"<!-- locust:{label} -->", f"### {title}", "", textwrap.fill(notes, 76, break_on_hyphens=False), "",
             "| run | requests | success | QPS | total P50 ms | P95 | P99 | TTFT P50 ms | P95 | P99 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [run_row(name, read_summary(path)) for name, path in runs]
    lines += ["", f"<!-- /locust:{label} -->"]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--doc", required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--title", required=True)
    parser.add_argument("--notes", default="")
    parser.add_argument("runs", nargs="+", help="NAME=SUMMARY_JSON")
    args = parser.parse_args()
    runs = [tuple(r.split("=", 1)) for r in args.runs]
    text = section(args.label, args.title, args.notes, runs)
    doc = pathlib.Path(args.doc)
    old = doc.read_text(encoding="utf-8") if doc.exists() else ""
    pattern = re.compile(rf"<!-- locust:{re.escape(args.label)} -->.*?<!-- /locust:{re.escape(args.label)} -->", re.S)
    new = pattern.sub(lambda _: text, old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + text + "\n"
    doc.write_text(new, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
