#!/usr/bin/env bash
# The README's main job: sets up, builds, validates every config in configs/ (each node's lane and
# side-lane keys, or each refusal), then speaks a sentence with the real Qwen3-TTS model through mstar's
# engine and worker (`qwen3tts synth`: the Talker on the chain, the codec decoder beside it on the side
# lane) and writes speech.wav, then runs the scheduling workload (the Qwen3-TTS-shaped cost model under the
# worker, configs/qwen3tts.yaml) and prints its summary table.
#
#   bash scripts/run.sh                                        # the committed tiny checkpoint (random weights)
#   bash scripts/run.sh --model DIR --speaker ryan --text "Hello there." --language english --out hello.wav
#
# Without arguments the checkpoint is tests/fixtures/qwen3tts/tiny06: random weights in the official
# layout, so the "speech" is noise; with the official weights (Qwen3-TTS-12Hz-0.6B-CustomVoice and the
# others, published by Qwen on Hugging Face and ModelScope; download the folder yourself, nothing is fetched
# at run time) it is speech. Arguments go to `qwen3tts synth` (see its --help). The real model runs where
# synth's --device says: auto (the default) runs the CUDA Talker and codec when the build has CUDA and a GPU is
# present, the host backend (float32) otherwise or when the checkpoint samples with top_p < 1 (--greedy runs on
# CUDA); the cost model uses the CUDA backend when a GPU is present.
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
if [ "$#" -eq 0 ]; then
  set -- --model tests/fixtures/qwen3tts/tiny06 --speaker vivian --language auto \
    --text "Hello from mstar: the Talker on the chain, the codec beside it." --out speech.wav
  echo "== qwen3tts synth (tests/fixtures/qwen3tts/tiny06: random weights, so the audio is noise)"
else
  echo "== qwen3tts synth $*"
fi
"$build/examples/qwen3tts" synth "$@"
synth_rc=$?
echo
echo "== the scheduling workload: qwen3tts (cost model, configs/qwen3tts.yaml)"
"$build/examples/qwen3tts" --config configs/qwen3tts.yaml
run_rc=$?
# Non-zero when a config was refused or a run failed (a byte-identity break of the cost model exits 2).
[ "$validate_rc" -ne 0 ] && exit "$validate_rc"
[ "$synth_rc" -ne 0 ] && exit "$synth_rc"
exit "$run_rc"
