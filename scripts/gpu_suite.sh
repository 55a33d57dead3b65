#!/usr/bin/env bash
# The whole test suite on a GPU machine: builds with the CUDA sources (-Dgpu=enabled, so a missing
# nvcc is an error rather than a quiet host-only build), then runs every meson test (every suite,
# GPU tests beside host tests, as the README's test command does) and ends with the line
# "N passed, N failed". Run it before calling a GPU-facing change done.
#
#   bash scripts/gpu_suite.sh                 # build-gpu/, all tests
#   bash scripts/gpu_suite.sh --suite gpu     # arguments go to meson test
#   OUT=/some/dir bash scripts/gpu_suite.sh   # also writes the logs there (below)
#
# MSTAR_BUILD_DIR picks the build directory (default build-gpu), MSTAR_GPU_ARCH the architecture
# (default 90: H100, H200), MSTAR_SKIP_SETUP=1 skips scripts/setup.sh (a machine without network
# whose tools are installed already: setup.sh then only checks). With $OUT set, it receives:
# machine.txt (nvidia-smi, nvcc, compilers, meson), configure.log, build.log, test.log (meson
# test's output), testlog.txt and testlog.json (meson's own logs, every test's output) and
# summary.txt (the last line).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${MSTAR_BUILD_DIR:-build-gpu}
arch=${MSTAR_GPU_ARCH:-90}
out=${OUT:-}
[ -n "$out" ] && mkdir -p "$out"

# Copies stdin to $OUT/<name> when OUT is set, and to stdout always.
keep() {
  if [ -n "$out" ]; then tee "$out/$1"; else cat; fi
}
finish() {
  echo "$1" | keep summary.txt
  if [ -n "$out" ] && [ -d "$build/meson-logs" ]; then
    cp "$build/meson-logs/testlog.txt" "$build/meson-logs/testlog.json" "$out/" 2>/dev/null
  fi
  exit "$2"
}

if [ "${MSTAR_SKIP_SETUP:-0}" != 1 ]; then
  bash scripts/setup.sh || finish "0 passed, 1 failed (scripts/setup.sh failed)" 1
fi
. scripts/env.sh
if ! command -v nvcc >/dev/null 2>&1; then
  finish "0 passed, 1 failed (no nvcc on PATH or in /usr/local/cuda/bin: this script is for a CUDA machine)" 1
fi

{
  date -u
  nvidia-smi 2>&1 || echo "nvidia-smi failed: no driver or no GPU visible"
  nvcc --version
  "${CXX:-c++}" --version | head -n1
  echo "meson $(meson --version), ninja $(ninja --version), cmake $(cmake --version 2>/dev/null | head -n1)"
  git log -1 --format='commit %H %s' 2>/dev/null
} 2>&1 | keep machine.txt

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dgpu=enabled -Dgpu_arch="$arch" --buildtype=release 2>&1 | keep configure.log
  [ "${PIPESTATUS[0]}" -eq 0 ] || finish "0 passed, 1 failed (meson setup failed: configure.log)" 1
fi
ninja -C "$build" -j"$(nproc)" 2>&1 | keep build.log
[ "${PIPESTATUS[0]}" -eq 0 ] || finish "0 passed, 1 failed (the build failed: build.log)" 1

meson test -C "$build" --print-errorlogs --num-processes "$(nproc)" "$@" 2>&1 | keep test.log
rc=${PIPESTATUS[0]}
line=$(python3 scripts/count_tests.py "$build/meson-logs/testlog.json" | tail -n1) || rc=1
finish "$line" "$rc"
