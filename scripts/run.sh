#!/usr/bin/env bash
# The README's main job: sets up, builds, validates every config in configs/ (each node's lane and
# side-lane keys, or each refusal), then runs the Qwen3-TTS-shaped example under the worker with the
# default config (configs/qwen3tts.yaml) on whatever machine this is: the CUDA backend when a GPU is
# present, else the host backend at small sizes (well within a minute on 2 cores). It prints the
# summary table. Arguments go to qwen3tts (e.g. --check-identity, -c 16, --json out.json).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh || exit 1
. scripts/env.sh
build=${MSTAR_BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release || exit 1
fi
ninja -C "$build" -j"$(nproc)" tools/mstar-validate examples/qwen3tts || exit 1
echo "== configs"
"$build/tools/mstar-validate" configs/*.yaml
validate_rc=$?
echo
echo "== qwen3tts (configs/qwen3tts.yaml)"
"$build/examples/qwen3tts" --config configs/qwen3tts.yaml "$@"
run_rc=$?
# Non-zero when a config was refused or the example failed (a byte-identity break exits 2).
[ "$validate_rc" -ne 0 ] && exit "$validate_rc"
exit "$run_rc"
