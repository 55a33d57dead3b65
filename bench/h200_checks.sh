#!/bin/bash
# One call on the GPU machine over the binaries scripts/pack_gpu.sh put in build-gpu/ (carry it):
#   bash bench/h200_checks.sh        (in the call: carry ["build-gpu"]; about 60 s on an H200)
# Worker handoff (pinned to CPUs 2, 3, 4), kernels (benchmark, GPU tests, sanitizers), engine and
# example GPU tests, the step benchmark. Every log goes into one file, $OUT/h200_checks.tgz (rewritten after
# each part, so a run cut short still returns what it did); a summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
D=$PWD/build-gpu
[ -x "$D/mstar_gpu_tests" ] || { echo "h200_checks.sh: no binaries in build-gpu/; run scripts/pack_gpu.sh here and carry build-gpu"; exit 2; }
export LD_LIBRARY_PATH=$D/lib:${LD_LIBRARY_PATH:-}
S=$SECONDS
R=${OUT:?set OUT to the folder the logs go to}; OUT=/tmp/h200_checks; rm -rf $OUT; mkdir -p $OUT
pk() { tar czf $R/h200_checks.tgz -C $OUT . ; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
echo "binaries: $(cat $D/COMMIT 2>/dev/null || echo unknown); CPUs: $(nproc)"
echo "== worker bench pinned ($((SECONDS-S)) s)"
timeout 90 $D/mstar_worker_bench --requests 128 --frames 1000 --pin 2,3,4 > $OUT/worker128.txt 2>&1; echo "rc $?"
timeout 60 $D/mstar_worker_bench --requests 256 --frames 496 --pin 2,3,4 > $OUT/worker256.txt 2>&1; echo "rc $?"
timeout 40 $D/mstar_handoff_bench > $OUT/handoff.txt 2>&1; echo "rc $?"
pk; echo "== engine + example GPU tests ($((SECONDS-S)) s)"
timeout 60 $D/mstar_engine_gpu_tests --no-intro > $OUT/engine_gpu.log 2>&1; echo "engine rc $?"
timeout 90 $D/mstar_example_gpu_tests --no-intro > $OUT/example_gpu.log 2>&1; echo "example rc $?"
pk; echo "== kernels ($((SECONDS-S)) s)"
mkdir -p $OUT/k; OUT=$OUT/k MSTAR_PREBUILT=$D MSTAR_SKIP_FLOOR=1 timeout 300 bash bench/kernels/run_h200.sh > $OUT/kernels_run.txt 2>&1; echo "kernels rc $?"
pk; echo "== step bench ($((SECONDS-S)) s)"
timeout 60 $D/qwen3tts_step_bench > $OUT/step_bench.txt 2>&1; echo "step rc $?"
pk; echo "== summary ($((SECONDS-S)) s)"
grep -iE "handoff|pass|p50|p99" $OUT/worker128.txt | head -20
grep -iE "p50|p99|ring|baseline" $OUT/handoff.txt | head -8
grep -E "test cases|assertions" $OUT/engine_gpu.log $OUT/example_gpu.log
sed -n '/== summary/,$p' $OUT/kernels_run.txt
tail -12 $OUT/step_bench.txt
pk
