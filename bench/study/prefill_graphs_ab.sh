#!/bin/bash
# Same-call A/B of talker_prefill's CUDA graphs on the GPU machine (binaries of scripts/pack_gpu.sh
# carried in DIR): qwen3tts at c = 16 and 128, lane off and on, all widths, two runs an arm, once with
# --prefill-graphs off and once on, in alternating processes (off, on, off, on). JSONs and logs go
# into $OUT/prefill_graphs_ab.tar; compare with
#   python3 bench/study/lane_study.py table OUT/prefill_graphs_ab.tar    (per file: tar x first)
#   python3 bench/study/lane_study.py prefill FILE.json
#
#   bash bench/study/prefill_graphs_ab.sh [DIR]      (DIR default build-gpu; about 2 minutes)
set -uo pipefail
cd "$(dirname "$0")/../.."
D=${1:-build-gpu}
R=${OUT:?set OUT to the folder the results go to}
W=/tmp/prefill_graphs_ab; rm -rf "$W"; mkdir -p "$W"
export LD_LIBRARY_PATH=$PWD/$D/lib:${LD_LIBRARY_PATH:-}
for c in 16 128; do
  for round in 1 2; do
    for mode in off on; do
      echo "== c=$c prefill graphs $mode (round $round, $SECONDS s)"
      timeout 120 "$D/qwen3tts" --backend cuda --config configs/qwen3tts.yaml -c "$c" -n $((9 * c)) --warmup "$c" \
        --lane off,on --codec-batching all --repeats 1 --settle --no-progress --prefill-graphs "$mode" \
        --json "$W/ab_c${c}_${mode}_${round}.json" > "$W/ab_c${c}_${mode}_${round}.txt" 2>&1
      echo "rc $?"; grep -E "^\| *$c \|" "$W/ab_c${c}_${mode}_${round}.txt" | head -4
      tar cf "$R/prefill_graphs_ab.tar" -C "$W" .
    done
  done
done
