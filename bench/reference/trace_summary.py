#!/usr/bin/env python3
"""Where a worker's time went: reads the Chrome trace of `qwen3tts loadgen --trace` (or any mstar worker
trace) and prints, per track (thread or stream) and event name, the count, the total and mean duration, the
mean and largest `rows` argument, and each track's busy share of the traced span.

    python3 bench/reference/trace_summary.py run.trace.json [--from-s 2.5]

--from-s leaves out events that begin earlier than that many seconds after the first event (warm-up)."""
import argparse
import collections
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--from-s", type=float, default=0.0, help="skip events beginning earlier than this (seconds)")
    a = ap.parse_args()
    try:
        with open(a.trace) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"trace_summary: cannot read {a.trace}: {e}")
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        sys.exit(f"trace_summary: {a.trace} has no complete events")
    t0 = min(e["ts"] for e in spans) + a.from_s * 1e6
    spans = [e for e in spans if e["ts"] >= t0]
    if not spans:
        sys.exit(f"trace_summary: no event begins after --from-s {a.from_s}")
    end = max(e["ts"] + e["dur"] for e in spans)
    wall = max(end - t0, 1e-9)

    groups = collections.defaultdict(list)
    by_track = collections.defaultdict(list)
    for e in spans:
        track = names.get(e["tid"], str(e["tid"]))
        groups[(track, e["name"])].append(e)
        by_track[track].append((e["ts"], e["ts"] + e["dur"]))

    def busy(intervals):
        total, reach = 0.0, None
        for b, x in sorted(intervals):
            if reach is None or b > reach:
                total += x - b
                reach = x
            elif x > reach:
                total += x - reach
                reach = x
        return total

    print(f"traced span {wall / 1e6:.3f} s")
    print("| track | busy share |")
    print("| :--- | ---: |")
    for track in sorted(by_track):
        print(f"| {track} | {busy(by_track[track]) / wall:.3f} |")
    print()
    print("| track | event | count | total ms | mean ms | mean rows | max rows |")
    print("| :--- | :--- | ---: | ---: | ---: | ---: | ---: |")
    for (track, name), es in sorted(groups.items(), key=lambda kv: -sum(e["dur"] for e in kv[1])):
        rows = [e["args"]["rows"] for e in es if "rows" in e.get("args", {})]
        total = sum(e["dur"] for e in es) / 1e3
        mean_rows = f"{sum(rows) / len(rows):.1f}" if rows else "-"
        max_rows = str(max(rows)) if rows else "-"
        print(f"| {track} | {name} | {len(es)} | {total:.1f} | {total / len(es):.3f} | {mean_rows} | {max_rows} |")


if __name__ == "__main__":
    main()
