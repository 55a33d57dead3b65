#!/bin/bash
# Builds the GPU binaries here (release, CUDA for sm_90; no GPU needed) and copies them, with the
# shared libraries a bare GPU machine may lack (yaml-cpp, fmt), into build-gpu/ (ignored by git), to be
# carried to the GPU machine and run there by bench/h200_checks.sh and bench/study/study_h200.sh:
#
#   bash scripts/pack_gpu.sh [BUILD_DIR]      (default /tmp/mstar_gpu_build)
#
# The binaries carry the commit they were built from in build-gpu/COMMIT (with "+dirty" when the tree
# had uncommitted changes), so the figures they produce can name it.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-/tmp/mstar_gpu_build}
source scripts/env.sh 2>/dev/null || true
command -v nvcc >/dev/null || { echo "pack_gpu.sh: nvcc is not on PATH; the GPU binaries need the CUDA toolkit" >&2; exit 1; }
[ -d "$B" ] || meson setup "$B" --buildtype=release -Dgpu=enabled >/dev/null
T=(examples/qwen3tts bench/study/qwen3tts_step_bench tests/gpu/mstar_gpu_tests tests/engine/mstar_engine_gpu_tests
   tests/example/mstar_example_gpu_tests bench/kernels/mstar_recurrent_bench bench/kernels/mstar_copy_floor_bench
   bench/worker/mstar_worker_bench bench/handoff/mstar_handoff_bench)
ninja -C "$B" "${T[@]}"
rm -rf build-gpu && mkdir -p build-gpu/lib
for t in "${T[@]}"; do cp "$B/$t" build-gpu/; done
strip build-gpu/* 2>/dev/null || true
for lib in libyaml-cpp libfmt; do
  p=$(ldd build-gpu/qwen3tts | awk -v l="$lib" '$1 ~ "^"l {print $3}')
  [ -n "$p" ] && cp -L "$p" build-gpu/lib/
done
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!build-gpu' || echo +dirty)" > build-gpu/COMMIT
echo "build-gpu/: $(ls build-gpu | wc -l) entries, $(du -sh build-gpu | cut -f1), commit $(cat build-gpu/COMMIT)"
