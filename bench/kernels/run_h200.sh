#!/usr/bin/env bash
# One call on the GPU machine for the recurrent-state kernels: configure and build with meson (build
# directory under /tmp; if the project as a whole does not configure or build there, the same sources
# are built with nvcc directly), run the GPU tests, run compute-sanitizer memcheck and racecheck on a
# reduced case set (MSTAR_GPU_QUICK=1), then run the benchmark, whose table is printed last.
#
#   bash bench/kernels/run_h200.sh            (from the repository root; logs go to $OUT when it is set)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${MSTAR_KBUILD:-/tmp/mstar_kbuild}
LOG=${OUT:-/tmp}
status=0

echo "== machine: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null)"
commit=$(git rev-parse --verify -q HEAD 2>/dev/null) || commit=uncommitted
echo "== commit: $commit$(git status --porcelain 2>/dev/null | grep -q . && echo ' (+ uncommitted changes)')"
echo "== date: $(date -u +%Y-%m-%dT%H:%MZ)"
nvcc --version | tail -1

TESTS=$BUILD/tests/gpu/mstar_gpu_tests
BENCH=$BUILD/bench/kernels/mstar_recurrent_bench
rm -rf "$BUILD"
if ! { meson setup "$BUILD" -Dbuildtype=release >"$LOG/meson_setup.log" 2>&1 &&
       meson compile -C "$BUILD" mstar_gpu_tests mstar_recurrent_bench >"$LOG/meson_build.log" 2>&1; }; then
  echo "== meson build of the whole project failed (see meson_*.log); building the kernel sources with nvcc"
  tail -5 "$LOG/meson_setup.log" "$LOG/meson_build.log" 2>/dev/null
  D=$BUILD-direct
  mkdir -p "$D"
  F=(-std=c++20 -O3 -gencode=arch=compute_90,code=sm_90 --expt-relaxed-constexpr -I"$ROOT/include" -I"$ROOT/tests")
  nvcc "${F[@]}" -c kernels/qwen3tts.cu -o "$D/qwen3tts.o" &
  nvcc "${F[@]}" -c tests/gpu/recurrent_gpu_test.cu -o "$D/gpu_test.o" &
  nvcc "${F[@]}" -c tests/gpu/recurrent_instantiate.cu -o "$D/inst.o" &
  nvcc "${F[@]}" -c tests/gpu/main.cpp -o "$D/main.o" &
  wait
  nvcc "${F[@]}" bench/kernels/recurrent_bench.cu "$D/qwen3tts.o" -o "$D/mstar_recurrent_bench" || status=1
  nvcc "${F[@]}" "$D/main.o" "$D/gpu_test.o" "$D/inst.o" "$D/qwen3tts.o" -o "$D/mstar_gpu_tests" || status=1
  TESTS=$D/mstar_gpu_tests
  BENCH=$D/mstar_recurrent_bench
fi
[ -x "$TESTS" ] && [ -x "$BENCH" ] || { echo "== build failed"; exit 1; }

echo "== GPU tests (full set)"
"$TESTS" --no-intro >"$LOG/gpu_tests.log" 2>&1
rc=$?
grep -E "^\[doctest\] (test cases|assertions)|ERROR|FAILED|no CUDA device" "$LOG/gpu_tests.log" | head -20
[ $rc = 0 ] || { echo "   GPU tests exit code $rc"; status=1; }

for tool in memcheck racecheck; do
  echo "== compute-sanitizer --tool $tool (MSTAR_GPU_QUICK=1)"
  MSTAR_GPU_QUICK=1 compute-sanitizer --tool "$tool" --error-exitcode 9 "$TESTS" --no-intro \
    >"$LOG/sanitizer_$tool.log" 2>&1
  rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test cases:" "$LOG/sanitizer_$tool.log"
  [ $rc = 0 ] || { echo "   $tool exit code $rc"; status=1; }
done

echo "== benchmark"
"$BENCH" 2>&1 | tee "$LOG/bench.txt" || status=1
echo "== overall status: $status"
exit $status
