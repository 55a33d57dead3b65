#!/usr/bin/env python3
"""Per-kernel GPU time of one profiled decode step, from ncu's CSV (--csv --print-units base, the metric
gpu__time_duration.sum, one row per kernel launch).

    python3 bench/reference/kernel_profile.py ncu.csv [--top 20]

Groups launches by kernel name (template arguments cut), and prints per group the launches, the summed time,
its share of the sum, and the mean; then the sum over every kernel, the time the step takes when replayed
without a profiler belongs beside it (the difference is the graph's gaps between kernels).
"""
import csv
import re
import sys
from collections import defaultdict


def short(name):
    name = re.sub(r"\(anonymous namespace\)::|<unnamed>::", "", name)  # before the cuts below
    name = re.sub(r"<.*", "", name)           # template arguments
    name = re.sub(r"\(.*", "", name)          # parameter list
    return name.replace("void ", "").strip()[:70]


def main():
    path = sys.argv[1]
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 20
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu prints its own messages before the CSV
    groups = defaultdict(lambda: [0, 0.0])
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ns = float(row["Metric Value"].replace(",", ""))
        g = groups[short(row["Kernel Name"])]
        g[0] += 1
        g[1] += ns
    total = sum(v[1] for v in groups.values())
    launches = sum(v[0] for v in groups.values())
    print("| kernel | launches | GPU us | share | mean us |")
    print("| :-- | --: | --: | --: | --: |")
    for name, (n, ns) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:top]:
        print("| %s | %d | %.1f | %.1f %% | %.2f |" % (name, n, ns / 1e3, 100 * ns / total if total else 0, ns / 1e3 / n))
    print("\nKERNELS %d launches, %.1f us of kernel time in all" % (launches, total / 1e3))


if __name__ == "__main__":
    main()
