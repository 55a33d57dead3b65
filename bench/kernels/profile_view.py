#!/usr/bin/env python3
"""Summarizes bench/kernels/profile_h200.sh's Nsight Compute report: one line a profiled launch.

    python3 bench/kernels/profile_view.py kernels_profile.csv kernels_profile.txt
    python3 bench/kernels/profile_view.py kernels_profile.csv kernels_profile.txt --source kernels_source.csv N

kernels_profile.csv is `ncu --import ... --csv --page raw` (a header row, a units row, then one row a
kernel, in launch order); kernels_profile.txt holds the benchmark's "profiled N: <table> | <variant>
<direction>" lines, in the same order. Columns: the kernel, its GPU time (us), achieved occupancy,
warp cycles per issued instruction and the five largest stall reasons in cycles per issued
instruction (long_sb: waiting on a global load; imc: constant-cache miss, a kernel parameter read;
no_inst: instruction fetch; wait: fixed latency; lg: the load/store queue full), DRAM bytes over the
ideal (read + write of the moved bytes) and the L2 hit rate. With --source, the SASS of launch N
(the number in the first column's "profiled N" order) with the warp-stall samples at each instruction
(kernels_source.csv holds two blocks a launch, in launch order; the first is printed).
"""
import csv
import re
import sys

STALL = re.compile(r"smsp__average_warps_issue_stalled_(.+)_per_issue_active\.ratio")
SHORT = {"long_scoreboard": "long_sb", "imc_miss": "imc", "no_instruction": "no_inst", "lg_throttle": "lg",
         "short_scoreboard": "short_sb", "branch_resolving": "branch", "not_selected": "not_sel",
         "math_pipe_throttle": "math", "dispatch_stall": "dispatch", "mio_throttle": "mio"}


def number(text):
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


def load(csv_path, order_path):
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    # ncu may print ==PROF== lines before the table: the header is the row naming the kernel.
    start = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    header, units, data = rows[start], rows[start + 1], rows[start + 2:]
    with open(order_path) as f:
        order = [line.split(":", 1)[1].strip() for line in f if line.startswith("profiled ")]
    return header, units, data, order


def column(header, name):
    return header.index(name) if name in header else None


def source_of(path, launch):
    blocks = []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                blocks.append({"name": row[1], "header": None, "rows": []})
            elif row[0] == "Address" and blocks:
                blocks[-1]["header"] = row
            elif blocks:
                blocks[-1]["rows"].append(row)
    per_launch = max(1, len(blocks) // max(1, launch[1]))
    b = blocks[launch[0] * per_launch]
    col = b["header"].index("Warp Stall Sampling (All Samples)")
    total = sum(int(r[col] or 0) for r in b["rows"]) or 1
    print(b["name"])
    for r in b["rows"]:
        if r[1].strip() != "NOP":
            print(f"{r[col]:>6} {100.0 * int(r[col] or 0) / total:5.1f}%  {r[1].strip()}")


def main(argv):
    if len(argv) == 6 and argv[3] == "--source":
        header, units, data, order = load(argv[1], argv[2])
        source_of(argv[4], (int(argv[5]), len(order)))
        return 0
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    header, units, data, order = load(argv[1], argv[2])
    if len(order) != len(data):
        print(f"profile_view: {len(data)} kernels in the report, {len(order)} launches named; "
              "pairing the first of each", file=sys.stderr)
    name_col = column(header, "Kernel Name")
    dur_col = column(header, "gpu__time_duration.sum")
    occ_col = column(header, "sm__warps_active.avg.pct_of_peak_sustained_active")
    cpi_col = column(header, "smsp__average_warp_latency_per_inst_issued.ratio")
    rd_col, wr_col = column(header, "dram__bytes_read.sum"), column(header, "dram__bytes_write.sum")
    hit_col = column(header, "lts__t_sector_hit_rate.pct")
    stalls = [(i, STALL.match(h).group(1)) for i, h in enumerate(header) if STALL.match(h)]

    def scaled(row, col, to):  # a value in the unit `to` (us, B)
        if col is None:
            return None
        v = number(row[col])
        if v is None:
            return None
        u = units[col]
        factor = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6,
                  "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}.get(u, 1.0)
        return v * factor

    print(f"{'table | variant direction':58} {'kernel':9} {'us':>6} {'occ%':>5} {'cpi':>6}  stalls (cycles a issued instruction)")
    for label, row in zip(order, data):
        kernel = re.search(r"recurrent_(\w+?)_kernel", row[name_col]) if name_col is not None else None
        dur = scaled(row, dur_col, "us")
        occ = number(row[occ_col]) if occ_col is not None else None
        cpi = number(row[cpi_col]) if cpi_col is not None else None
        top = sorted(((number(row[i]) or 0.0, SHORT.get(s, s)) for i, s in stalls), reverse=True)[:5]
        dram = [scaled(row, c, "B") for c in (rd_col, wr_col)]
        hit = number(row[hit_col]) if hit_col is not None else None
        fmt = lambda v, spec: format(v, spec) if v is not None else "-"
        stall_text = " ".join(f"{s}={v:.1f}" for v, s in top if v > 0.05)
        dram_text = f" dram r/w MB {dram[0] / 1e6:.1f}/{dram[1] / 1e6:.1f}" if None not in dram else ""
        print(f"{label[:58]:58} {kernel.group(1) if kernel else '?':9} {fmt(dur, '6.2f')} {fmt(occ, '5.1f')} "
              f"{fmt(cpi, '6.1f')}  {stall_text}{dram_text} L2hit {fmt(hit, '.0f')}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
