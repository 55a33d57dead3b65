#!/usr/bin/env bash
# The peers' side of the comparison with mstar on the GPU machine: one random-weight checkpoint at a published size,
# then the reference implementation and faster-qwen3-tts on it, with the same text and frame count that mstar's
# in-process and HTTP runs are given. Stages, in the order a GPU call runs them (mstar's runs go between checkpoint
# and reference, on the same folder):
#
#   wheels      here, with pip's registry: fills .whl/ (the pinned reference, as bench/gpu_session.sh does) and
#               .whl/faster/ (faster-qwen3-tts and what it lacks on the GPU machine); carry .whl
#   checkpoint  bench/reference/write_checkpoint.py into $CKPT (about 1 minute for 0.6B)
#   reference   bench/reference/reference_load.py at c = 1, 4, 16, 64 (REF_C), REF_N requests each (default
#               4,8,32,128; about 3 minutes for 0.6B at 48 frames)
#   faster      bench/reference/faster_load.py at c = 1, not streaming and streaming (about 1 minute)
#
#   SIZE=0.6b FRAMES=48 CKPT=/tmp/ck06 bash bench/reference/peers.sh checkpoint reference faster
#
# Each stage writes <stage>.json and <stage>.log under $OUT (default /tmp/peers) and ends with its table.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
size=${SIZE:-0.6b}
frames=${FRAMES:-48}
ckpt=${CKPT:-/tmp/ck${size//./}}
text=${TEXT:-Hello there, this is a test of the speech server.}
out=${OUT:-/tmp/peers}
mkdir -p "$out"

install() {  # install DIR SITE: the carried wheels of DIR into SITE, once
  [ -f "$2/.installed" ] && return 0
  ls "$1"/*.whl > /dev/null 2>&1 || { echo "peers.sh: no wheels in $1 (fill it here with: bash $0 wheels)" >&2; return 1; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$2" "$1"/*.whl &&
    touch "$2/.installed"
}

stage_wheels() {
  bash bench/gpu_session.sh wheels > /dev/null || return 1
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl/faster \
    faster-qwen3-tts==0.5.4 qwen-tts-hf==0.1.1.post1 accelerate==1.12.0 psutil==7.2.2 soxr==0.5.0.post1
  ls -la .whl .whl/faster
}

stage_checkpoint() {
  install .whl /tmp/site || return 1
  env PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 300 python3 bench/reference/write_checkpoint.py \
    --size "$size" --frames "$frames" --out "$ckpt" 2>&1 | tee "$out/checkpoint.log" | grep '^write_checkpoint'
}

stage_reference() {
  install .whl /tmp/site || return 1
  env PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 500 python3 bench/reference/reference_load.py --model "$ckpt" \
    -c "${REF_C:-1,4,16,64}" -n "${REF_N:-4,8,32,128}" --text "$text" --voice ryan --language english --frames "$frames" \
    --json "$out/reference.json" 2>&1 | grep -v pad_token_id > "$out/reference.log"
  grep -E '^(c=|\||reference_load)' "$out/reference.log" || tail -20 "$out/reference.log"
}

stage_faster() {
  install .whl/faster /tmp/site-faster || return 1
  env PYTHONPATH=/tmp/site-faster PYTHONUNBUFFERED=1 timeout 300 python3 bench/reference/faster_load.py \
    --model "$ckpt" -n 8 --chunks 0,1,12 --text "$text" --voice ryan --language english --frames "$frames" \
    --json "$out/faster.json" > "$out/faster.log" 2>&1
  grep -E '^(faster|\|)' "$out/faster.log" || tail -20 "$out/faster.log"
}

for s in "$@"; do
  case "$s" in
    wheels | checkpoint | reference | faster) "stage_$s" ;;
    *) echo "peers.sh: unknown stage $s (wheels, checkpoint, reference, faster)" >&2; exit 2 ;;
  esac
done
