#!/usr/bin/env python3
"""The lane study's table and plot, from qwen3tts --json files (study_h200.sh writes one per concurrency
and packs them, with its log and table, into study.tar; a .tar argument is read for its study_c*.json).

    python3 lane_study.py table study_c*.json            # markdown: the lane table and the targets
    python3 lane_study.py table study.tar                # the same, from study_h200.sh's tar
    python3 lane_study.py plot study.tar out.png         # steady audio throughput and first-audio p50 vs c
    python3 lane_study.py plot-log study.log out.png     # the plot from qwen3tts's printed tables
                                                         # (when only the log came back from the device)
    python3 lane_study.py first-arm study.tar ...        # each process's first arm: decode alone vs later arms
    python3 lane_study.py clocks study.tar               # each run's SM clock and power (gpu_clocks.csv)
    python3 lane_study.py prefill study.tar ...          # prefill steps per run and, lane off, their GPU time
    python3 lane_study.py docs study.tar                 # the targets table into docs/benchmarks.md (between
                                                         # its lane-table markers) and the plot into
                                                         # docs/lane_study.png; --benchmarks F, --png F, --no-plot

Figures of an arm are the median of its runs (study_h200.sh: three alternating runs per arm; the
median of two is their mean). Throughput is shown twice: over the whole run (from the first measured
submit to the last measured end) and in the steady state (all c slots busy: from the warmup's end to
the last submit; loadgen.hpp); the "auto / best" target uses the steady figure, and "spread" is the
steady figure's (max - min) / median over the arm's runs, the run-to-run noise. The table needs only
the standard library; the plot needs matplotlib.
"""
import datetime
import json
import os
import sys
import math
import tarfile
from collections import defaultdict

LANES = ["off", "on", "auto"]
BATCHINGS = ["per-width", "all"]


def documents(paths):
    """The qwen3tts JSON documents in paths: .json files, or tar files holding study_c*.json."""
    docs = []
    for p in paths:
        if p.endswith((".tar", ".tar.gz", ".tgz")):
            with tarfile.open(p) as t:
                names = sorted(m.name for m in t.getmembers()
                               if m.isfile() and m.name.split("/")[-1].startswith("study_c") and m.name.endswith(".json"))
                if not names:
                    sys.exit(f"lane_study.py: {p} holds no study_c*.json (made by study_h200.sh?)")
                for n in names:
                    docs.append((f"{p}:{n}", t.extractfile(n).read()))
        else:
            with open(p, "rb") as f:
                docs.append((p, f.read()))
    out = []
    for name, raw in docs:
        try:
            out.append(json.loads(raw))
        except ValueError as e:
            sys.exit(f"lane_study.py: {name} is not qwen3tts JSON ({e}); a run cut short leaves it incomplete")
    if not out:
        sys.exit("lane_study.py: no input; give qwen3tts --json files or study_h200.sh's study.tar")
    return out


def load(paths):
    arms = defaultdict(list)  # (c, batching, lane) -> [arm, ...]
    meta, identity = None, {}
    for d in documents(paths):
        meta = meta or d
        for a in d["arms"]:
            arms[(a["c"], a["codec_batching"], a["lane"])].append(a)
            identity[a["c"]] = d["identity"]
    return arms, meta, identity


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else float("nan")


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    n = len(xs)
    if not n:
        return float("nan")
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def steady(a):
    """The steady-state audio s/s of a run (None when its window was empty, or from an older qwen3tts)."""
    return a.get("steady_audio_per_s")


def spread(xs):
    xs = [x for x in xs if x is not None]
    m = median(xs)
    return (max(xs) - min(xs)) / m if len(xs) > 1 and m else float("nan")


def pass_p50(a):
    for p in a["host_phases"]:
        if p["thread"] == "GPU" and p["node"] == "talker_decode" and p["phase"] == "pass":
            return p["p50_us"]
    return None


def fig(arms, key, f):
    return median([f(a) for a in arms.get(key, [])])


def beside_ratio(arms, c, batching):
    """Talker decode GPU time with the codec beside it over its time alone, bucket by bucket: the lane-on
    arms' steps that overlapped a codec step against the lane-off arms' steps (no codec beside), weighted
    by the beside steps' count."""
    alone, beside = defaultdict(list), defaultdict(list)
    for a in arms.get((c, batching, "off"), []):
        for b, v in ((a.get("device") or {}).get("decode_by_bucket") or {}).items():
            if v["alone"] >= 3:
                alone[b].append(v["alone_ms"])
    for a in arms.get((c, batching, "on"), []):
        for b, v in ((a.get("device") or {}).get("decode_by_bucket") or {}).items():
            if v["beside"] >= 3:
                beside[b].append((v["beside_ms"], v["beside"]))
    num = den = 0.0
    for b, vs in beside.items():
        if b not in alone:
            continue
        ref = mean(alone[b])
        for ms, n in vs:
            num += n * ms / ref
            den += n
    return num / den if den else float("nan")


def table(paths):
    print("\n".join(table_lines(paths)))


def table_lines(paths, loaded=None):
    arms, meta, identity = loaded or load(paths)
    cs = sorted({k[0] for k in arms})
    out = []
    out.append(f"Machine: {meta.get('machine')}; backend {meta.get('backend')}; config {meta.get('config')} "
               f"(Talker hidden {meta['talker']['hidden']} x {meta['talker']['layers']} layers); ramp {meta['ramp']}; "
               f"sentences {meta['frames'][0]}-{meta['frames'][1]} frames; date {meta.get('date')}.")
    out.append("")
    out.append("| c | codec batching | lane | runs | audio s/s, whole run | audio s/s, steady (spread) "
               "| first audio p50 / p95 / p99 ms | gap p50 / p95 ms | codec steps per Talker step | GPU busy "
               "| pass p50 us | decode alone / beside ms | on lane |")
    out.append("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in cs:
        for b in BATCHINGS:
            for l in LANES:
                k = (c, b, l)
                if k not in arms:
                    continue
                A = arms[k]
                m = lambda f: median([f(a) for a in A])
                dev = lambda f: median([f(a["device"]) if a.get("device") else None for a in A])
                on_lane = m(lambda a: a["steps"]["codec_on_lane"] / max(a["steps"]["codec"], 1))
                st = [steady(a) for a in A]
                out.append(
                    f"| {c} | {b} | {l} | {len(A)} | {m(lambda a: a['audio_per_s']):.1f} | "
                    f"{median(st):.1f} ({100 * spread(st):.1f}%) | "
                    f"{m(lambda a: a['first_audio']['p50_ms']):.1f} / {m(lambda a: a['first_audio']['p95_ms']):.1f}"
                    f" / {m(lambda a: a['first_audio']['p99_ms']):.1f} | "
                    f"{m(lambda a: a['gap']['p50_ms']):.1f} / {m(lambda a: a['gap']['p95_ms']):.1f} | "
                    f"{m(lambda a: a['codec_steps_per_talker_step']):.2f} | "
                    f"{100 * m(lambda a: a['gpu_busy_fraction']):.1f}% | {m(pass_p50):.1f} | "
                    f"{dev(lambda d: d['decode_alone_p50_ms']):.2f} / {dev(lambda d: d['decode_beside_p50_ms']):.2f} | "
                    f"{100 * on_lane:.0f}% |")
    out.append("")
    out.append("Targets (per concurrency and codec batching):")
    out.append("")
    out.append("| c | codec batching | auto / best of off, on, steady (>= 0.98) | the same, whole run "
               "| on / off first-audio p50 (<= 1.5) | decode beside / alone (<= 1.15) | byte-identical |")
    out.append("| ---: | --- | ---: | ---: | ---: | ---: | --- |")
    for c in cs:
        for b in BATCHINGS:
            if not any((c, b, l) in arms for l in LANES):
                continue
            w = {l: fig(arms, (c, b, l), lambda a: a["audio_per_s"]) for l in LANES}
            t = {l: fig(arms, (c, b, l), steady) for l in LANES}
            f = {l: fig(arms, (c, b, l), lambda a: a["first_audio"]["p50_ms"]) for l in LANES}
            best = max(t["off"], t["on"])
            r1 = t["auto"] / best if best else float("nan")
            best_w = max(w["off"], w["on"])
            r1w = w["auto"] / best_w if best_w else float("nan")
            r2 = f["on"] / f["off"] if f["off"] else float("nan")
            r3 = beside_ratio(arms, c, b)
            ok = lambda v, lim, ge: "" if v != v else (" (met)" if (v >= lim if ge else v <= lim) else " (NOT met)")
            ident = identity.get(c, {})
            out.append(f"| {c} | {b} | {r1:.3f}{ok(r1, 0.98, True)} | {r1w:.3f} | {r2:.2f}{ok(r2, 1.5, False)} | "
                       f"{r3:.3f}{ok(r3, 1.15, False)} | {'yes' if ident.get('identical') else 'NO'} "
                       f"(digest {ident.get('digest')}) |")
    ratios = [fig(arms, (c, b, "auto"), steady) / fig(arms, (c, b, "on"), steady) for c in cs for b in BATCHINGS
              if (c, b, "auto") in arms and (c, b, "on") in arms]
    ratios = [r for r in ratios if r == r and r > 0]
    if ratios:
        out.append("")
        out.append(f"auto / on, steady, geometric mean over the {len(ratios)} cells: "
                   f"{math.exp(sum(math.log(r) for r in ratios) / len(ratios)):.3f}")
    if 128 in cs:
        p = [pass_p50(a) for k, A in arms.items() if k[0] == 128 for a in A]
        p = [x for x in p if x is not None]
        if p:
            out.append("")
            out.append(f"Host time per pass on the GPU thread (talker_decode), p50 at c=128: {mean(p):.1f} us mean over "
                       f"arms, {max(p):.1f} us the largest (target <= 60 us: {'met' if max(p) <= 60 else 'NOT met'}).")
    return out


BEGIN, END = "<!-- lane-table:begin -->", "<!-- lane-table:end -->"


def docs(argv):
    """docs STUDY... [--benchmarks FILE] [--png FILE | --no-plot]: the targets table (and the lines after
    it) replaces the lines between the lane-table marker lines in FILE (docs/benchmarks.md), and the
    plot is drawn into --png (docs/lane_study.png). Every other line of FILE is kept as it was."""
    usage = "usage: lane_study.py docs STUDY.tar|study_c*.json ... [--benchmarks FILE] [--png FILE | --no-plot]"
    paths, bench, png, i = [], "docs/benchmarks.md", "docs/lane_study.png", 0
    while i < len(argv):
        if argv[i] in ("--benchmarks", "--png"):
            if i + 1 >= len(argv):
                sys.exit(f"lane_study.py docs: {argv[i]} needs a file; {usage}")
            if argv[i] == "--benchmarks":
                bench = argv[i + 1]
            else:
                png = argv[i + 1]
            i += 2
        elif argv[i] == "--no-plot":
            png, i = None, i + 1
        elif argv[i].startswith("--"):
            sys.exit(f"lane_study.py docs: unknown option {argv[i]}; {usage}")
        else:
            paths, i = paths + [argv[i]], i + 1
    if not paths:
        sys.exit(f"lane_study.py docs: give study_h200.sh's study.tar (or qwen3tts --json files); {usage}")
    if png:  # before anything is written: a missing plotter leaves the file as it was
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            sys.exit("lane_study.py docs: the plot needs matplotlib (pip install matplotlib), or pass --no-plot")
    with open(bench, newline="") as f:
        lines = f.read().splitlines(keepends=True)
    marks = [(n, l.rstrip("\r\n")) for n, l in enumerate(lines) if l.rstrip("\r\n") in (BEGIN, END)]
    if [m for _, m in marks] != [BEGIN, END]:
        sys.exit(f"lane_study.py docs: {bench} needs exactly one line {BEGIN} and, after it, one line {END}, "
                 "around the lane table; add them where the table goes")
    eol = "\r\n" if lines[marks[0][0]].endswith("\r\n") else "\n"
    loaded = load(paths)
    table, meta = table_lines(paths, loaded), loaded[1]
    targets = table[table.index("Targets (per concurrency and codec batching):") + 2:]
    names = " ".join(os.path.basename(p) for p in paths)
    block = [f"Written by `python3 bench/study/lane_study.py docs {names}` (study of {meta.get('date')}, "
             f"{meta.get('machine')}):", ""] + targets
    out = lines[:marks[0][0] + 1] + [l + eol for l in block] + lines[marks[1][0]:]
    tmp = bench + ".tmp"
    with open(tmp, "w", newline="") as f:
        f.write("".join(out))
    os.replace(tmp, bench)
    print(f"lane_study.py docs: the lane table of {names} written into {bench}")
    if png:
        plot(paths, png)
        print(f"lane_study.py docs: the plot drawn into {png}")


def first_arm(paths):
    """Per qwen3tts run (one JSON per concurrency): the Talker decode step's GPU time alone in its most
    used bucket, for the first arm the process ran against the median of its later arms."""
    print("| c | bucket | first arm | decode alone, first arm ms | later arms, median ms | first / later |")
    print("| ---: | ---: | --- | ---: | ---: | ---: |")
    for d in documents(paths):
        arms = d["arms"]

        def alone(a, bucket=None):
            b = (a.get("device") or {}).get("decode_by_bucket") or {}
            if bucket is None:
                bucket = max(b, key=lambda k: b[k]["alone"] + b[k]["beside"], default=None)
            v = b.get(bucket)
            return bucket, (v["alone_ms"] if v and v["alone"] >= 3 else None)

        bucket, first = alone(arms[0])
        later = median([alone(a, bucket)[1] for a in arms[1:]])
        if first is None or later != later:
            continue
        a0 = arms[0]
        print(f"| {a0['c']} | {bucket} | {a0['lane']}, {a0['codec_batching']} | {first:.2f} | {later:.2f} | "
              f"{first / later:.3f} |")


def clock_log(path):
    """(unix s, SM MHz, memory MHz, power W, temperature C) rows of study_h200.sh's gpu_clocks.csv, from
    the study's tar or its directory."""
    if path.endswith((".tar", ".tar.gz", ".tgz")):
        with tarfile.open(path) as t:
            names = [m.name for m in t.getmembers() if m.name.split("/")[-1] == "gpu_clocks.csv"]
            if not names:
                sys.exit(f"lane_study.py: {path} holds no gpu_clocks.csv (a study from before the clock log)")
            text = t.extractfile(names[0]).read().decode()
    else:
        with open(f"{path}/gpu_clocks.csv") as f:
            text = f.read()
    rows = []
    for line in text.splitlines():
        f = [x.strip() for x in line.split(",")]
        try:  # "2026/12/04 19:00:00.123" in UTC (study_h200.sh runs nvidia-smi with TZ=UTC)
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
            rows.append((t.timestamp(),) + tuple(float(x) for x in f[1:5]))
        except (ValueError, IndexError):
            pass  # a line nvidia-smi wrote about itself, a field it could not read ("[N/A]"), or one cut short
    return rows


def clocks(path):
    """Each arm's runs with the GPU's mean SM clock and power over the run, and per arm the median."""
    log = clock_log(path)
    def by_c(name):  # study_c8.json before study_c16.json
        digits = "".join(ch for ch in name.split("/")[-1] if ch.isdigit())
        return int(digits) if digits else 0

    jsons = documents([path] if path.endswith((".tar", ".tar.gz", ".tgz")) else
                      sorted((f"{path}/{n}" for n in os.listdir(path)
                              if n.startswith("study_c") and n.endswith(".json")), key=by_c))

    def during(a):
        t0, t1 = a.get("started_unix_s"), a.get("ended_unix_s")
        if t0 is None or t1 is None:
            return None
        inside = [r for r in log if t0 <= r[0] <= t1]
        return (mean([r[1] for r in inside]), mean([r[3] for r in inside]), len(inside)) if inside else None

    print(f"\nGPU clock during each run (nvidia-smi every 200 ms, {len(log)} samples; SM MHz mean / power W mean):\n")
    print("| c | codec batching | lane | steady audio s/s per run | decode alone p50 ms per run | SM MHz per run | "
          "power W per run |")
    print("| ---: | --- | --- | --- | --- | --- | --- |")
    for d in jsons:
        by = defaultdict(list)
        for a in d["arms"]:
            by[(a["c"], a["codec_batching"], a["lane"])].append(a)
        for (c, b, lane), runs in sorted(by.items(), key=lambda kv: (kv[0][0], BATCHINGS.index(kv[0][1]),
                                                                     LANES.index(kv[0][2]))):
            w = [during(a) for a in runs]
            fmt = lambda xs, f: " / ".join(f.format(x) if x is not None else "-" for x in xs)
            print(f"| {c} | {b} | {lane} | {fmt([steady(a) for a in runs], '{:.0f}')} | "
                  f"{fmt([(a.get('device') or {}).get('decode_alone_p50_ms') for a in runs], '{:.2f}')} | "
                  f"{fmt([x[0] if x else None for x in w], '{:.0f}')} | {fmt([x[1] if x else None for x in w], '{:.0f}')} |")


def prefill(paths):
    """Per run: the Talker's prefill steps and requests per prefill step (measured requests plus a warmup
    of c, as study_h200.sh runs them); for lane-off runs (every step on the chain stream, none
    overlapping) also the prefill's GPU time, estimated as the run's busy time (busy fraction x wall
    time) less its decode and codec steps (count x median), per prefill step and as a share."""
    print("| c | codec batching | lane | run | prefill steps | requests per prefill | prefill ms per step (off) | "
          "prefill share of busy (off) |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for d in documents(paths):
        for a in sorted(d["arms"], key=lambda a: (BATCHINGS.index(a["codec_batching"]), LANES.index(a["lane"]),
                                                  a["repeat"])):
            st, dev = a["steps"], a.get("device") or {}
            req = a["requests"]
            n = st["prefill"]
            per = (req["completed"] + req["cancelled"] + req["failed"] + a["c"]) / n if n else float("nan")
            cost = share = "-"
            if a["lane"] == "off" and dev.get("busy", -1) > 0 and n:
                busy_ms = dev["busy"] * a["wall_s"] * 1e3
                rest = busy_ms - st["decode"] * dev["decode_alone_p50_ms"] - st["codec"] * dev["codec_p50_ms"]
                cost, share = f"{rest / n:.2f}", f"{rest / busy_ms:.0%}"
            print(f"| {a['c']} | {a['codec_batching']} | {a['lane']} | {a['repeat']} | {n} | {per:.2f} | {cost} | "
                  f"{share} |")


def load_log(path):
    """Arms from the tables qwen3tts prints (one row per run: c, lane, codec, audio s/s, first audio
    p50/p95/p99, ...); only the fields the plot reads."""
    arms = defaultdict(list)
    with open(path) as f:
        for line in f:
            cells = [x.strip() for x in line.strip().strip("|").split("|")]
            if len(cells) < 5 or not cells[0].isdigit() or cells[1] not in LANES:
                continue
            # Since the steady-state column (after audio s/s; "-" when its window was empty).
            has_steady = "ms" not in cells[4]
            first = cells[5] if has_steady else cells[4]
            arms[(int(cells[0]), cells[2], cells[1])].append({
                "audio_per_s": float(cells[3]),
                "steady_audio_per_s": float(cells[4]) if has_steady and cells[4] != "-" else None,
                "first_audio": {"p50_ms": float(first.split("/")[0])},
            })
    return arms


def plot(paths, png, arms=None, meta=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if arms is None:
        arms, meta, _ = load(paths)
    cs = sorted({k[0] for k in arms})
    fig_, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    styles = {"off": "-", "on": "--", "auto": ":"}
    colors = {"per-width": "tab:blue", "all": "tab:orange"}
    for b in BATCHINGS:
        for l in LANES:
            xs = [c for c in cs if (c, b, l) in arms]
            if not xs:
                continue
            label = f"lane {l}, codec {b}"
            thr = lambda a: steady(a) if steady(a) is not None else a["audio_per_s"]
            ax[0].plot(xs, [fig(arms, (c, b, l), thr) for c in xs], styles[l], marker="o", color=colors[b],
                       label=label)
            ax[1].plot(xs, [fig(arms, (c, b, l), lambda a: a["first_audio"]["p50_ms"]) for c in xs], styles[l],
                       marker="o", color=colors[b], label=label)
    for a, title, y in ((ax[0], "audio throughput, steady state (all c slots busy)", "audio seconds per second"),
                        (ax[1], "time to first audio, p50", "ms")):
        a.set_xscale("log", base=2)
        a.set_xticks(cs)
        a.set_xticklabels([str(c) for c in cs])
        a.set_xlabel("concurrency c")
        a.set_ylabel(y)
        a.set_title(title)
        a.grid(True, alpha=0.3)
    ax[1].set_yscale("log")
    ax[0].legend(fontsize=8)
    fig_.suptitle(f"qwen3tts lane study: {meta.get('machine')}, {meta.get('date')}", fontsize=10)
    fig_.tight_layout()
    fig_.savefig(png, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "table":
        table(sys.argv[2:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "first-arm":
        first_arm(sys.argv[2:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "prefill":
        prefill(sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "clocks":
        clocks(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "plot-log":
        plot([], sys.argv[3], arms=load_log(sys.argv[2]), meta={"machine": "NVIDIA H200", "date": "2026-12-03"})
    elif len(sys.argv) >= 4 and sys.argv[1] == "plot":
        plot(sys.argv[2:-1], sys.argv[-1])
    elif len(sys.argv) >= 3 and sys.argv[1] == "docs":
        docs(sys.argv[2:])
    else:
        sys.exit(__doc__)
