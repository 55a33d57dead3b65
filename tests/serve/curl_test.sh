#!/bin/sh
# One streamed request to `qwen3tts serve` with curl (a real client's chunked decoding); exit 77 (skipped)
# when curl is not installed.   curl_test.sh QWEN3TTS MODEL_DIR
set -eu
command -v curl >/dev/null 2>&1 || { echo "curl is not installed: skipped"; exit 77; }
dir=$(mktemp -d)
"$1" serve --model "$2" --port 0 >"$dir/out" 2>"$dir/err" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do grep -q listening "$dir/out" && break; sleep 0.1; done
url=$(sed -n 's/^listening on //p' "$dir/out")
[ -n "$url" ] || { echo "the server printed no address:"; cat "$dir/err"; exit 1; }
curl -sS --fail -N -o "$dir/a.wav" -H 'Content-Type: application/json' \
  -d '{"model": "qwen3-tts", "input": "Hello from curl.", "voice": "vivian", "stream": true, "max_frames": 20}' \
  "$url/v1/audio/speech"
size=$(wc -c <"$dir/a.wav")
head=$(head -c 4 "$dir/a.wav")
sizes=$(od -An -tx1 -j4 -N4 "$dir/a.wav" | tr -d ' \n')
[ "$head" = RIFF ] || { echo "no RIFF header"; exit 1; }
[ "$sizes" = ffffffff ] || { echo "the RIFF size is $sizes, not the streaming ffffffff"; exit 1; }
[ "$size" -gt 44 ] || { echo "no samples after the header ($size bytes)"; exit 1; }
echo "curl streamed $size bytes"
