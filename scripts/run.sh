#!/usr/bin/env bash
# The README's main job: sets up, builds, and runs the main job on whatever machine this is.
# Until the Qwen3-TTS-shaped example exists, the main job validates every config in configs/
# and prints the verdicts (each node's lane and side-lane keys, or each refusal).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh || exit 1
. scripts/env.sh
build=${MSTAR_BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release || exit 1
fi
ninja -C "$build" -j"$(nproc)" tools/mstar-validate || exit 1
"$build/tools/mstar-validate" configs/*.yaml "$@"
