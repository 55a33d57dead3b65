#!/bin/bash
# On the GPU machine: the example's GPU tests, then the step benchmark (qwen3tts_step_bench), with
# logs under $OUT. Run from the repository root:
#
#   bash bench/study/run_h200.sh [DIR] [bench arguments...]
#
# DIR holds prebuilt mstar_example_gpu_tests and qwen3tts_step_bench (built on the CI machine, which
# has the same CUDA 13.0 toolkit); without it, or when they do not start, it builds them with meson
# in /tmp/qwen3tts_build (-Dgpu=enabled).
set -uo pipefail
OUT=${OUT:-/tmp/qwen3tts_out}
mkdir -p "$OUT"
DIR=${1:-}
shift || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv 2>&1 | tee "$OUT/gpu.txt"
T=""; S=""
if [ -n "$DIR" ] && "$DIR/mstar_example_gpu_tests" --help >/dev/null 2>&1 && [ -x "$DIR/qwen3tts_step_bench" ]; then
  T=$DIR/mstar_example_gpu_tests; S=$DIR/qwen3tts_step_bench
  echo "using prebuilt binaries from $DIR"
else
  echo "building with meson in /tmp/qwen3tts_build"
  grep -q "'example'" tests/meson.build || \
    sed -i "s/'engine', 'worker_primitives'\]/'engine', 'worker_primitives', 'example']/" tests/meson.build
  meson setup /tmp/qwen3tts_build -Dgpu=enabled >"$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 1; }
  ninja -C /tmp/qwen3tts_build bench/study/qwen3tts_step_bench tests/example/mstar_example_gpu_tests \
    >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  T=/tmp/qwen3tts_build/tests/example/mstar_example_gpu_tests; S=/tmp/qwen3tts_build/bench/study/qwen3tts_step_bench
fi
echo "== GPU tests"
"$T" --no-intro 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
echo "tests rc=${PIPESTATUS[0]}"
echo "== step benchmark"
"$S" "$@" 2>&1 | tee "$OUT/bench.log"
echo "bench rc=${PIPESTATUS[0]}"
