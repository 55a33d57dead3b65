#!/usr/bin/env bash
# The README's test command: sets up, builds (CUDA sources too when nvcc is found), runs every
# test, and ends with one line "N passed, N failed" counted from the test runners'
# own results (doctest test cases, one per other meson test).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh || exit 1
. scripts/env.sh
build=${MSTAR_BUILD_DIR:-build}

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release || { echo "0 passed, 1 failed"; exit 1; }
fi
if ! ninja -C "$build" -j"$(nproc)"; then
  echo "build failed"
  echo "0 passed, 1 failed"
  exit 1
fi
meson test -C "$build" --print-errorlogs --num-processes "$(nproc)" "$@"
rc=$?
python3 scripts/count_tests.py "$build/meson-logs/testlog.json" || rc=1
exit $rc
