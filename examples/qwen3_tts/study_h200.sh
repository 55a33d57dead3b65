#!/bin/bash
# The lane study on the GPU machine: qwen3tts at c in {8, 16, 32, 64, 128}, lane off / on / auto, both
# codec batchings (one step per window width, one step for every width), two alternating runs per
# arm (all arms of a concurrency run once, then all again, in one process). Writes under $OUT the
# raw JSON of each concurrency (study_c<N>.json), the log, and the lane table (lane_table.md, made
# by lane_study.py, which needs no matplotlib). The plot is made elsewhere from the JSON:
#   python3 examples/qwen3_tts/lane_study.py plot OUT/study_c*.json docs/lane_study.png
#
#   bash examples/qwen3_tts/study_h200.sh [DIR]
#
# DIR holds a prebuilt qwen3tts (built with -Dgpu=enabled on the CI machine, CUDA 13.0, sm_90) and
# DIR/lib its yaml-cpp and fmt libraries; without it, or when it does not start, it builds qwen3tts
# with meson -Dgpu=enabled in /tmp/qwen3tts_study. Sizes: 6 x c measured requests per run (warmup c),
# sentences of 25-150 frames (2-12 s), about 2 s a run: the whole study fits in about 300 s.
set -uo pipefail
OUT=${OUT:-/tmp/qwen3tts_study_out}
mkdir -p "$OUT"
DIR=${1:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv 2>&1 | tee "$OUT/gpu.txt"
Q=""
if [ -n "$DIR" ] && [ -x "$DIR/qwen3tts" ]; then
  export LD_LIBRARY_PATH="$DIR/lib:${LD_LIBRARY_PATH:-}"
  if "$DIR/qwen3tts" --help >/dev/null 2>&1; then Q=$DIR/qwen3tts; echo "using the prebuilt $Q"; fi
fi
if [ -z "$Q" ]; then
  echo "building qwen3tts with meson -Dgpu=enabled in /tmp/qwen3tts_study"
  meson setup /tmp/qwen3tts_study -Dgpu=enabled -Dtests=false >"$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 1; }
  ninja -C /tmp/qwen3tts_study examples/qwen3tts >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  Q=/tmp/qwen3tts_study/examples/qwen3tts
fi
rc=0
for c in 8 16 32 64 128; do
  echo "== c=$c"
  "$Q" --backend cuda --config configs/qwen3tts.yaml -c "$c" -n $((6 * c)) --warmup "$c" \
    --lane off,on,auto --codec-batching per-width,all --repeats 2 --no-progress \
    --json "$OUT/study_c$c.json" 2>&1 | tee -a "$OUT/study.log"
  r=${PIPESTATUS[0]}
  echo "c=$c rc=$r"
  [ "$r" -ne 0 ] && rc=$r
done
python3 examples/qwen3_tts/lane_study.py table "$OUT"/study_c*.json > "$OUT/lane_table.md" 2>&1
cat "$OUT/lane_table.md"
echo "study rc=$rc"
exit $rc
