#!/bin/bash
# The lane study on the GPU machine: qwen3tts at c in {8, 16, 32, 64, 128}, lane off / on / auto, both
# codec batchings (one step per window width, one step for every width), three alternating runs per
# arm (all arms of a concurrency run once, then all again, in one process per concurrency). Every
# output (the JSON of each concurrency, study_c<N>.json; the log, study.log; the lane table,
# lane_table.md, made by lane_study.py, which needs no matplotlib; gpu.txt and any build log) goes
# into ONE file, $OUT/study.tar, rewritten after each concurrency, so that a run cut short still
# returns what it measured. The table is printed last. At the end it writes the targets table into
# docs/benchmarks.md (between the lane-table markers) and the plot into docs/lane_study.png (when
# matplotlib is there) and puts both in the tar; on the GPU machine the tree is a copy, so here:
#   python3 bench/study/lane_study.py docs OUT/study.tar      (the same two files, in this tree)
#
#   bash bench/study/study_h200.sh [DIR]
#
# DIR holds a prebuilt qwen3tts (built with -Dgpu=enabled on the CI machine, CUDA 13.0, sm_90) and
# DIR/lib its yaml-cpp and fmt libraries; without it, or when it does not start, it builds qwen3tts
# with meson -Dgpu=enabled in /tmp/qwen3tts_study.
#
# Sizes: c=8 runs 64 measured requests (8 x c; its runs are the shortest), every other c 6 x c;
# warmup c; sentences of 25-150 frames (2-12 s). The figures of an arm are the median of its runs.
# Each concurrency's process first runs its first arm once unrecorded (qwen3tts --settle): in every
# study of 2026-12-04 the first arm a process ran had its decode step take 0.91-0.92 of the later
# arms' time (2.37 against 2.58 ms at 128 rows; lane_study.py first-arm), which favoured lane off,
# per-width, in its first repetition. The GPU's clocks are logged (gpu_clocks.csv, every 200 ms) and
# `lane_study.py clocks` gives each arm's SM clock and power during its runs: in the studies of
# 2026-12-04 evening the SM clock was 1980 MHz in every run (the spread between runs came from the
# scheduling, docs/benchmarks.md; a "decode alone" p50 that moves between 2.35 and 2.6 ms in lane-on
# arms is a median over few steps of mixed buckets, not a clock change: at 128 rows it is 2.59-2.60).
# Time: the whole study must fit one device call of 520 s. STUDY_BUDGET_S (default 470) is shared
# among the concurrencies in proportion to their expected run time (the unspent part of one passes to
# the next), and qwen3tts --time-budget starts a second or third repetition of a concurrency only
# when it fits its share; the first repetition always runs. The table's "runs" column says how many
# ran. Measured on 2026-12-04: 265 s of runs at the default sizes, about 390 s at STUDY_SCALE_PCT=150.
#
# STUDY_CS="64 128" runs only those concurrencies (to finish a study cut short; lane_study.py table
# takes the JSONs of several runs). STUDY_SCALE_PCT=150 runs 1.5 x those requests per run (longer
# steady windows, less spread; the runs take about that much longer).
#
# STUDY_SMOKE=1: the same commands on the host backend at tiny sizes (c = 2, 4; seconds), to check
# the script, the tar and lane_study.py end to end on a machine without a GPU.
set -uo pipefail
OUT=${OUT:-/tmp/qwen3tts_study_out}
mkdir -p "$OUT"
DIR=${1:-}
SMOKE=${STUDY_SMOKE:-0}
BUDGET=${STUDY_BUDGET_S:-470}
REPEATS=${STUDY_REPEATS:-3}
SCALE=${STUDY_SCALE_PCT:-100} # measured requests per run, percent of the sizes below
W=$(mktemp -d /tmp/qwen3tts_study.XXXXXX) # the tar's contents, outside $OUT
pack() { tar -cf "$W.tar" -C "$W" . && mv -f "$W.tar" "$OUT/study.tar"; }

if [ "$SMOKE" = 1 ]; then
  BACKEND=host; CS="2 4"; BUDGET=${STUDY_BUDGET_S:-60}
  SIZES=(--frames-max 16)
  weight() { echo 1; }
  requests() { echo $((8 * $1)); }
  echo "smoke mode: host backend, c in $CS" | tee "$W/gpu.txt"
else
  BACKEND=cuda; CS=${STUDY_CS:-8 16 32 64 128}
  SIZES=()
  # Expected seconds of one run of one arm (H200, 2-run study of 2026-12-03), as relative weights.
  weight() { case $1 in 8) echo 58;; 16) echo 55;; 32) echo 56;; 64) echo 65;; *) echo 72;; esac; }
  requests() { if [ "$1" -le 8 ]; then echo $((8 * $1 * SCALE / 100)); else echo $((6 * $1 * SCALE / 100)); fi; }
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv 2>&1 | tee "$W/gpu.txt"
fi

Q=""
if [ -n "$DIR" ] && [ -x "$DIR/qwen3tts" ]; then
  export LD_LIBRARY_PATH="$DIR/lib:${LD_LIBRARY_PATH:-}"
  if "$DIR/qwen3tts" --help >/dev/null 2>&1; then Q=$DIR/qwen3tts; echo "using the prebuilt $Q"; fi
fi
if [ -z "$Q" ]; then
  echo "building qwen3tts with meson -Dgpu=enabled in /tmp/qwen3tts_study"
  meson setup /tmp/qwen3tts_study -Dgpu=enabled -Dtests=false >"$W/setup.log" 2>&1 || { tail -30 "$W/setup.log"; pack; exit 1; }
  ninja -C /tmp/qwen3tts_study examples/qwen3tts >"$W/build.log" 2>&1 || { tail -40 "$W/build.log"; pack; exit 1; }
  Q=/tmp/qwen3tts_study/examples/qwen3tts
fi

# The GPU's clocks, power and temperature every 200 ms through the study (read only: nvidia-smi -lms),
# into gpu_clocks.csv; lane_study.py clocks joins it with each run's start and end (started_unix_s).
SAMPLER=""
if [ "$SMOKE" != 1 ] && command -v nvidia-smi >/dev/null; then
  # Timestamps in UTC (TZ), so they compare with the runs' Unix times whatever the machine's zone.
  TZ=UTC nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv,noheader,nounits -lms 200 > "$W/gpu_clocks.csv" 2>&1 &
  SAMPLER=$!
  trap '[ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null' EXIT # also when the study is cut short
fi
START=$SECONDS
STARTUP=8 # seconds a qwen3tts process spends outside its arms (CUDA context, cuBLAS, graph capture)
SETTLE=6  # its settling run (--settle: the first arm once, unrecorded; one run at 1.5 x the sizes)
rc=0
left=""
for c in $CS; do left="$left $c"; done
for c in $CS; do
  rest=0
  for d in $left; do rest=$((rest + $(weight "$d"))); done
  left=${left/ $c/}
  share=$(( (BUDGET - (SECONDS - START)) * $(weight "$c") / rest - STARTUP - SETTLE ))
  [ "$share" -lt 1 ] && share=1
  echo "== c=$c: $(requests "$c") measured requests per run, up to $REPEATS runs per arm, time budget ${share} s" \
    | tee -a "$W/study.log"
  "$Q" --backend "$BACKEND" --config configs/qwen3tts.yaml -c "$c" -n "$(requests "$c")" --warmup "$c" \
    --lane off,on,auto --codec-batching per-width,all --repeats "$REPEATS" --time-budget "$share" --no-progress --settle \
    "${SIZES[@]}" --json "$W/study_c$c.json" 2>&1 | tee -a "$W/study.log"
  r=${PIPESTATUS[0]}
  echo "c=$c rc=$r after $((SECONDS - START)) s" | tee -a "$W/study.log"
  [ "$r" -ne 0 ] && rc=$r
  pack
done
[ -n "$SAMPLER" ] && { kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null; }
python3 bench/study/lane_study.py table "$W"/study_c*.json > "$W/lane_table.md" 2>&1 || rc=1
if [ -s "$W/gpu_clocks.csv" ]; then
  python3 bench/study/lane_study.py clocks "$W" >> "$W/lane_table.md" 2>&1 || echo "lane_study.py clocks failed" >> "$W/lane_table.md"
fi
# The targets table into a copy of docs/benchmarks.md (between its lane-table markers) and the plot
# into lane_study.png, both in the tar; then, except in the smoke run (a test never edits the tree),
# into docs/ (on the GPU machine a copy of the tree; here `python3 bench/study/lane_study.py
# docs OUT/study.tar` writes them again).
cp docs/benchmarks.md "$W/benchmarks.md"
PLOT=(--png "$W/lane_study.png"); python3 -c "import matplotlib" 2>/dev/null || PLOT=(--no-plot)
if python3 bench/study/lane_study.py docs "$W"/study_c*.json --benchmarks "$W/benchmarks.md" "${PLOT[@]}" \
     >> "$W/study.log" 2>&1; then
  if [ "$SMOKE" != 1 ]; then
    cp "$W/benchmarks.md" docs/benchmarks.md
    [ -f "$W/lane_study.png" ] && cp "$W/lane_study.png" docs/lane_study.png
  fi
else
  echo "lane_study.py docs failed (study.log)" | tee -a "$W/lane_table.md"; rc=1
fi
echo "study rc=$rc, $((SECONDS - START)) s of runs" >> "$W/lane_table.md"
pack
rm -rf "$W"
# The listing is read once into a variable: `tar -tf | grep -q` under pipefail fails whenever
# grep exits on its match before tar has written the rest (tar gets SIGPIPE), which CI hit.
listing=$(tar -tf "$OUT/study.tar") || { echo "study.tar cannot be read"; rc=1; }
echo "== outputs: $OUT/study.tar ($(echo "$listing" | tr '\n' ' '))"
# The tar must hold every concurrency's JSON and the table, and lane_study.py must read it.
for f in $(for c in $CS; do echo "study_c$c.json"; done) lane_table.md study.log benchmarks.md; do
  grep -qx "./$f" <<<"$listing" || { echo "study.tar lacks $f"; rc=1; }
done
written=$(tar -xOf "$OUT/study.tar" ./benchmarks.md 2>/dev/null) # read whole: see the listing above
grep -q '^Written by `python3 bench/study/lane_study.py docs study_c' <<<"$written" ||
  { echo "study.tar's benchmarks.md lacks the lane table"; rc=1; }
for cmd in table first-arm; do
  python3 bench/study/lane_study.py $cmd "$OUT/study.tar" >/dev/null || { echo "lane_study.py $cmd cannot read study.tar"; rc=1; }
done
# The settling run is not recorded: each (lane, batching, repetition) appears once in a JSON.
python3 - "$OUT/study.tar" <<'PY' || rc=1
import json, sys, tarfile
from collections import Counter
with tarfile.open(sys.argv[1]) as t:
    for m in t.getmembers():
        if m.name.split("/")[-1].startswith("study_c") and m.name.endswith(".json"):
            arms = json.load(t.extractfile(m))["arms"]
            twice = [k for k, n in Counter((a["lane"], a["codec_batching"], a["repeat"]) for a in arms).items() if n > 1]
            if twice:
                sys.exit(f"{m.name}: arms recorded twice (the settling run?): {twice}")
PY
if [ "$SMOKE" = 1 ] && python3 -c "import matplotlib" 2>/dev/null; then
  python3 bench/study/lane_study.py plot "$OUT/study.tar" "$OUT/lane_study_smoke.png" || { echo "the plot failed"; rc=1; }
fi
tar -xOf "$OUT/study.tar" ./lane_table.md
exit $rc
