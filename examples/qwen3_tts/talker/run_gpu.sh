#!/usr/bin/env bash
# The CUDA Talker on a GPU machine, in one go (about 2-4 minutes on an H100/H200, at most 6): configure a build
# with -Dgpu=enabled, build only mstar_talker_gpu_tests and qwen3tts_talker_bench, run the GPU tests
# (then once more under compute-sanitizer memcheck), run the bench, and print a short table last.
# Logs go to $OUT (default /tmp/talker_gpu). Exit status: the GPU tests' (0 pass, 1 fail).
#
#   examples/qwen3_tts/talker/run_gpu.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${OUT:-/tmp/talker_gpu}"
build="$root/build-talker-gpu"
mkdir -p "$out"
cd "$root"
start=$SECONDS

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > "$out/gpu.txt" 2>&1
if [ -f "$build/.mstar-carried" ]; then
  echo "the carried build of $(cat "$root/build-carry/COMMIT" 2>/dev/null) (bench/gpu_session.sh talker):" \
    "not built here"
else
  if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dgpu=enabled --buildtype=release > "$out/setup.log" 2>&1 ||
      { tail -30 "$out/setup.log"; echo "meson setup failed (log: $out/setup.log)"; exit 2; }
  fi
  ninja -C "$build" -j "$(nproc)" tests/gpu/mstar_talker_gpu_tests examples/qwen3_tts/talker/qwen3tts_talker_bench \
    > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; echo "build failed (log: $out/build.log)"; exit 2; }
  echo "configured and built in $((SECONDS - start)) s"
fi

timeout 80 "$build/tests/gpu/mstar_talker_gpu_tests" --no-intro > "$out/gpu_tests.log" 2>&1
test_rc=$?
cat "$out/gpu_tests.log"

san_rc=skipped
if command -v compute-sanitizer > /dev/null; then
  # Three short tests that reach every kernel (prefill, split and fused decode, graphs, sampling); the
  # longer ones launch 10^4 to 10^5 kernels, too slow under memcheck.
  timeout 75 compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$build/tests/gpu/mstar_talker_gpu_tests" --no-intro \
    --test-case='*captured*,*same logits*,*fused attention*' \
    > "$out/memcheck.log" 2>&1
  san_rc=$?
  tail -5 "$out/memcheck.log"
fi

timeout 80 "$build/examples/qwen3_tts/talker/qwen3tts_talker_bench" --iters 100 > "$out/bench.log" 2>&1
bench_rc=$?
cat "$out/bench.log"
timeout 30 "$build/examples/qwen3_tts/talker/qwen3tts_talker_bench" --iters 50 --model 0.6b --rows 1,64 --sample \
  > "$out/bench_sample.log" 2>&1
sample_rc=$?
cat "$out/bench_sample.log"

echo
echo "==== CUDA Talker on $(head -2 "$out/gpu.txt" | tail -1 | cut -d, -f1) ($((SECONDS - start)) s) ===="
echo "GPU tests: rc $test_rc ($(grep -E 'test cases:' "$out/gpu_tests.log" | tail -1 | tr -s ' '))"
grep -E '^host vs cuda|codebook .*: host' "$out/gpu_tests.log" | head -6
echo "memcheck (graph, sampler and fused-attention tests): rc $san_rc"
echo "bench: rc $bench_rc (greedy), rc $sample_rc (sampling, 0.6B)"
grep -E '^(device|0\.6B|1\.7B):' "$out/bench.log"
grep '^RESULT' "$out/bench.log" | sed 's/^RESULT //'
grep '^RESULT' "$out/bench_sample.log" | sed 's/^RESULT /sampled /'
[ "$test_rc" -eq 0 ] || exit 1
