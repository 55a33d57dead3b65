#!/usr/bin/env python3
"""The comparison's table and ratios, from the JSON rows its runs wrote into one folder.

    python3 bench/reference/compare_table.py DIR

DIR holds inproc.json and inproc_<variant>.json (`qwen3tts loadgen`, the variants with other codec options,
their rows named by them), http_<lane>.json (`qwen3tts loadgen-http` against a server per
lane), reference.json (bench/reference/reference_load.py) and, where it ran, faster.json
(bench/reference/faster_load.py): each a JSON array of rows (or {"rows": [...]}) with system, lane, c, n, ok,
failed, wall_s, frames, audio_s_per_s, first_p50_ms, first_p95_ms, gap_p95_ms. Prints one markdown table of
every row, then a line per target of issue 18, each starting with RATIO:
at least 30x the reference's audio throughput at c = 16 and 50x at c = 64 (mstar's best lane, in process and
through the server), a single stream at most 5 ms a frame, first audio p50 at c = 1 at most half the best
peer's.
"""
import json
import os
import sys


def rows_of(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        data = json.load(f)
    rows = data.get("rows", []) if isinstance(data, dict) else data
    for r in rows:  # the Python peers' scripts spell the first-audio keys out
        for short_key, long_key in (("first_p50_ms", "first_audio_p50_ms"), ("first_p95_ms", "first_audio_p95_ms")):
            if short_key not in r and long_key in r:
                r[short_key] = r[long_key]
    return rows


def ms_per_frame(r):
    # One stream's time a frame: at c = 1 the requests run one after another, so wall time over frames made.
    if r.get("c") != 1:
        return None
    if r.get("frames") and r.get("wall_s"):
        return 1e3 * r["wall_s"] / r["frames"]
    if r.get("audio_s") and r.get("wall_s") and str(r.get("system", "")).startswith("mstar"):
        return 1e3 * r["wall_s"] / (12.5 * r["audio_s"])  # frames from the audio delivered (12.5 a second)
    return r.get("ms_per_frame_step")


def fmt(v, unit="", digits=1):
    return "-" if v is None else ("%.*f%s" % (digits, v, unit))


def main():
    d = sys.argv[1]
    inproc = ["inproc.json"] + sorted(n for n in os.listdir(d) if n.startswith("inproc_") and n.endswith(".json"))
    rows = [r for name in inproc for r in rows_of(os.path.join(d, name))]
    for lane in ("off", "on", "auto"):
        rows += rows_of(os.path.join(d, "http_%s.json" % lane))
    peers = rows_of(os.path.join(d, "reference.json")) + rows_of(os.path.join(d, "faster.json"))
    rows += peers
    print("| system | lane | c | n | ok | failed | audio s/s | first audio p50 | first audio p95 | gap p95 | "
          "ms a frame (c = 1) |")
    print("| :-- | :-- | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
    for r in rows:
        print("| %s | %s | %d | %d | %d | %d | %s | %s | %s | %s | %s |" % (
            r.get("system"), r.get("lane", "-"), r.get("c", 0), r.get("n", 0), r.get("ok", 0), r.get("failed", 0),
            fmt(r.get("audio_s_per_s"), "", 2), fmt(r.get("first_p50_ms"), " ms"), fmt(r.get("first_p95_ms"), " ms"),
            fmt(r.get("gap_p95_ms"), " ms"), fmt(ms_per_frame(r), " ms", 2)))
    print()

    def best(system, c):
        # The system's best lane at c: the largest audio throughput among its rows with no failed request.
        vals = [r for r in rows if r.get("system") == system and r.get("c") == c
                and r.get("audio_s_per_s") is not None and not r.get("failed")]
        return max(vals, key=lambda r: r["audio_s_per_s"]) if vals else None

    ref = {r["c"]: r for r in peers if r.get("system") == "reference" and r.get("audio_s_per_s")}
    for c, target in ((1, None), (4, None), (16, 30.0), (64, 50.0)):
        for system in ("mstar", "mstar-http"):
            r = best(system, c)
            if c not in ref or r is None:
                continue
            ratio = r["audio_s_per_s"] / ref[c]["audio_s_per_s"]
            verdict = "" if target is None else (" (target %gx: %s)" % (target, "met" if ratio >= target else "MISSED"))
            print("RATIO audio s/s at c=%d: %s (lane %s) %.2f / reference %.2f = %.1fx%s" % (
                c, system, r.get("lane"), r["audio_s_per_s"], ref[c]["audio_s_per_s"], ratio, verdict))
    singles = [(ms_per_frame(r), r) for r in rows if str(r.get("system", "")).startswith("mstar")
               and ms_per_frame(r) is not None]
    if singles:
        v, r = min(singles, key=lambda x: x[0])
        print("RATIO single stream: %s (lane %s) %.2f ms a frame (target 5 ms: %s)" % (
            r["system"], r.get("lane"), v, "met" if v <= 5.0 else "MISSED"))
    firsts = [(r["first_p50_ms"], r) for r in peers if r.get("c") == 1 and r.get("first_p50_ms") is not None]
    ours = [(r["first_p50_ms"], r) for r in rows if str(r.get("system", "")).startswith("mstar") and r.get("c") == 1
            and r.get("first_p50_ms") is not None]
    if firsts and ours:
        p, pr = min(firsts, key=lambda x: x[0])
        for system in ("mstar", "mstar-http"):
            mine = [x for x in ours if x[1]["system"] == system]
            if not mine:
                continue
            v, r = min(mine, key=lambda x: x[0])
            print("RATIO first audio p50 at c=1: %s (lane %s) %.1f ms, best peer %s %.1f ms: %.3f of it (target 0.5: %s)"
                  % (system, r.get("lane"), v, pr["system"], p, v / p, "met" if v <= 0.5 * p else "MISSED"))


if __name__ == "__main__":
    main()
