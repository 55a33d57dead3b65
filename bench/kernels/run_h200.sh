#!/usr/bin/env bash
# One call on the GPU machine for the recurrent-state kernels: build (meson, build directory under
# /tmp; if the project as a whole does not configure or build there, the kernel sources are built
# with nvcc directly), then the two benchmarks (the floors first, then the launch-policy sweep and
# the tables), the GPU tests, and compute-sanitizer memcheck and racecheck on a reduced case set
# (MSTAR_GPU_QUICK=1). Benchmarks run first so that their figures come back even if a later step
# runs out of time; a summary is printed last.
#
#   bash bench/kernels/run_h200.sh            (from the repository root; logs go to $OUT when it is set)
#   MSTAR_PREBUILT=DIR bash bench/kernels/run_h200.sh
#       use mstar_gpu_tests, mstar_recurrent_bench and mstar_copy_floor_bench from DIR (built elsewhere
#       with the same nvcc for sm_90) when they start there; otherwise build as above.
#   MSTAR_SKIP_FLOOR=1 leaves out mstar_copy_floor_bench (the floors do not depend on the library).
#   MSTAR_BENCH_POLICY=auto runs the tables under the sweep's best policy, =<index> under that swept
#       policy; unset or 'default', under the launcher's default.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${MSTAR_KBUILD:-/tmp/mstar_kbuild}
LOG=${OUT:-/tmp}
status=0
[ "${MSTAR_BENCH_POLICY:-}" = default ] && unset MSTAR_BENCH_POLICY

echo "== machine: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null)"
commit=$(git rev-parse --verify -q HEAD 2>/dev/null) || commit=uncommitted
echo "== commit: $commit$(git status --porcelain 2>/dev/null | grep -q . && echo ' (+ uncommitted changes)')"
echo "== date: $(date -u +%Y-%m-%dT%H:%MZ)"
nvcc --version | tail -1

TESTS=$BUILD/tests/gpu/mstar_gpu_tests
BENCH=$BUILD/bench/kernels/mstar_recurrent_bench
FLOOR=$BUILD/bench/kernels/mstar_copy_floor_bench
prebuilt_ok=0
if [ -n "${MSTAR_PREBUILT:-}" ]; then
  P=$MSTAR_PREBUILT
  if "$P/mstar_gpu_tests" --no-intro -tc='an empty step*' >"$LOG/prebuilt_check.log" 2>&1; then
    TESTS=$P/mstar_gpu_tests BENCH=$P/mstar_recurrent_bench FLOOR=$P/mstar_copy_floor_bench prebuilt_ok=1
    echo "== using the prebuilt binaries in $P"
  else
    echo "== the prebuilt binaries do not start here ($(tail -1 "$LOG/prebuilt_check.log")); building"
  fi
fi
if [ $prebuilt_ok = 0 ]; then
  rm -rf "$BUILD"
  if ! { meson setup "$BUILD" -Dbuildtype=release >"$LOG/meson_setup.log" 2>&1 &&
         meson compile -C "$BUILD" mstar_gpu_tests mstar_recurrent_bench mstar_copy_floor_bench >"$LOG/meson_build.log" 2>&1; }; then
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
    nvcc "${F[@]}" bench/kernels/copy_floor_bench.cu "$D/qwen3tts.o" -o "$D/mstar_copy_floor_bench" || status=1
    nvcc "${F[@]}" "$D/main.o" "$D/gpu_test.o" "$D/inst.o" "$D/qwen3tts.o" -o "$D/mstar_gpu_tests" || status=1
    TESTS=$D/mstar_gpu_tests BENCH=$D/mstar_recurrent_bench FLOOR=$D/mstar_copy_floor_bench
  fi
fi
[ -x "$TESTS" ] && [ -x "$BENCH" ] && [ -x "$FLOOR" ] || { echo "== build failed"; exit 1; }
command -v cuobjdump >/dev/null && cuobjdump -sass "$BENCH" >"$LOG/sass.txt" 2>&1

if [ "${MSTAR_SKIP_FLOOR:-0}" = 1 ]; then
  echo "== floors skipped (MSTAR_SKIP_FLOOR=1)"
else
  echo "== floors"
  "$FLOOR" 2>&1 | tee "$LOG/floor.txt" || status=1
fi
echo "== benchmark"
"$BENCH" >"$LOG/bench.txt" 2>&1 || status=1

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

echo "== machine after: $(nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader 2>/dev/null)"
# Summary: the sweep's worst ratios, the several-segment table (2-D grid against the search kernel),
# the small steps, and the checks. Every log goes into one archive when $OUT is set.
echo "== summary"
grep -E "^(worst|slowest|tables below)" "$LOG/bench.txt"
sed -n '/several layers or pools/,/^$/p' "$LOG/bench.txt"
sed -n '/node steps/,/^$/p' "$LOG/bench.txt"
grep -E "^targets" "$LOG/bench.txt"
grep -E "^\[doctest\] (test cases|assertions)" "$LOG/gpu_tests.log" | head -2
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$LOG"/sanitizer_*.log
if [ -n "${OUT:-}" ]; then
  (cd "$OUT" && tar czf kernels_logs.tgz -- *.txt *.log 2>/dev/null && rm -f -- *.txt *.log)
fi
echo "== overall status: $status"
exit $status
