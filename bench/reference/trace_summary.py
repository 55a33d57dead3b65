#!/usr/bin/env python3
"""Where a worker's time went: reads the Chrome trace of `qwen3tts loadgen --trace` (or any mstar worker
trace) and prints, per track (thread or stream) and event name, the count, the total and mean duration, the
mean and largest `rows` argument, and each track's busy share of the traced span; then the share of the span
in which no GPU stream (a track named "... stream") was busy, and each chain-stream event's mean duration with and
without a lane-stream event overlapping it (a step beside the codec against alone, in place).

    python3 bench/reference/trace_summary.py run.trace.json [--from-s 2.5]

--from-s leaves out events that begin earlier than that many seconds after the first event (warm-up)."""
import argparse
import bisect
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
    streams = [t for t in by_track if t.endswith("stream")]
    if streams:
        gpu_busy = busy([iv for t in streams for iv in by_track[t]])
        print(f"| no GPU stream busy ({', '.join(sorted(streams))}) | {1 - gpu_busy / wall:.3f} |")
    print()
    print("| track | event | count | total ms | mean ms | mean rows | max rows |")
    print("| :--- | :--- | ---: | ---: | ---: | ---: | ---: |")
    for (track, name), es in sorted(groups.items(), key=lambda kv: -sum(e["dur"] for e in kv[1])):
        rows = [e["args"]["rows"] for e in es if "rows" in e.get("args", {})]
        total = sum(e["dur"] for e in es) / 1e3
        mean_rows = f"{sum(rows) / len(rows):.1f}" if rows else "-"
        max_rows = str(max(rows)) if rows else "-"
        print(f"| {track} | {name} | {len(es)} | {total:.1f} | {total / len(es):.3f} | {mean_rows} | {max_rows} |")

    lane = sorted(by_track.get("lane stream", []))
    if lane and "chain stream" in by_track:
        starts = [b for b, _ in lane]
        reach = []  # reach[i]: the latest end among lane[0..i]
        for _, x in lane:
            reach.append(max(x, reach[-1]) if reach else x)

        def overlaps(b, x):
            i = bisect.bisect_left(starts, x) - 1  # the last lane event starting before x
            return i >= 0 and reach[i] > b

        print()
        print("| chain-stream event | alone: count | alone: mean ms | beside the lane: count | beside: mean ms | "
              "beside / alone |")
        print("| :--- | ---: | ---: | ---: | ---: | ---: |")
        for (track, name), es in sorted(groups.items()):
            if track != "chain stream":
                continue
            alone = [e["dur"] / 1e3 for e in es if not overlaps(e["ts"], e["ts"] + e["dur"])]
            beside = [e["dur"] / 1e3 for e in es if overlaps(e["ts"], e["ts"] + e["dur"])]
            mean_alone = sum(alone) / len(alone) if alone else 0.0
            mean_beside = sum(beside) / len(beside) if beside else 0.0
            ratio = f"{mean_beside / mean_alone:.2f}" if alone and beside else "-"
            print(f"| {name} | {len(alone)} | {mean_alone:.3f} | {len(beside)} | {mean_beside:.3f} | {ratio} |")


if __name__ == "__main__":
    main()
