#!/usr/bin/env bash
# What an idle `qwen3tts serve` costs the host: starts the server on a free port, waits for /health, lets it settle
# for 2 s, then reads its CPU time and voluntary context switches (all threads, /proc) over 10 s with no request.
# Usage: bash bench/idle_cpu.sh [QWEN3TTS] [MODEL]   (defaults: build/examples/qwen3tts, the tiny fixture checkpoint)
set -u
q=${1:-build/examples/qwen3tts}
m=${2:-tests/fixtures/qwen3tts/tiny06}
log=$(mktemp)
"$q" serve --model "$m" --port 0 > "$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 150); do grep -q "listening on" "$log" && break; sleep 0.2; done
url=$(grep -o "http://[0-9.:]*" "$log" | head -1)
[ -n "$url" ] || { echo "the server did not start:"; cat "$log"; exit 1; }
curl -sf "$url/health" > /dev/null || { echo "no /health from $url"; exit 1; }
sleep 2
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
switches() { cat /proc/"$pid"/task/*/status | awk '/^voluntary_ctxt_switches/ {s += $2} END {print s}'; }
hz=$(getconf CLK_TCK)
t0=$(ticks) s0=$(switches)
sleep 10
t1=$(ticks) s1=$(switches)
awk -v t=$((t1 - t0)) -v s=$((s1 - s0)) -v hz="$hz" \
  'BEGIN { printf "idle serve: %.1f %% of a core, %d voluntary context switches a second (10 s)\n", 100 * t / hz / 10, s / 10 }'
