#!/usr/bin/env bash
# Builds the YAML loader's libFuzzer target with clang++ (-fsanitize=fuzzer,address,undefined) and
# runs it for a bounded time on a seed corpus made of configs/. Exits non-zero on a finding, and
# also when the fuzzer runtime is missing (a skipped fuzz run must not read as a pass).
#
#   tests/fuzz/run_fuzz.sh [SOURCE_ROOT] [WORK_DIR]
#   MSTAR_FUZZ_SECONDS=600 tests/fuzz/run_fuzz.sh     # a longer run (default 60 s)
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
work=${2:-$(mktemp -d)}
seconds=${MSTAR_FUZZ_SECONDS:-60}
cxx=${MSTAR_FUZZ_CXX:-clang++}
mkdir -p "$work"

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "run_fuzz: $cxx not found: bash scripts/setup.sh --fuzz installs clang and its fuzzer runtime" >&2
  exit 1
fi
# The fuzzer runtime lives in libclang-rt-14-dev; without it the link below fails. Check first so
# the message says what is missing.
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  >"$work/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer "$work/probe.cpp" -o "$work/probe" 2>"$work/probe.log"; then
  echo "run_fuzz: $cxx cannot link a libFuzzer target (-fsanitize=fuzzer): the fuzzer runtime is missing." >&2
  echo "run_fuzz: install it: bash scripts/setup.sh --fuzz (Debian 12: libclang-rt-14-dev)." >&2
  sed 's/^/  /' "$work/probe.log" >&2
  exit 1
fi

deps=$(pkg-config --cflags --libs yaml-cpp fmt) || { echo "run_fuzz: pkg-config finds no yaml-cpp or fmt" >&2; exit 1; }
echo "run_fuzz: building $work/config_fuzz"
# shellcheck disable=SC2086
if ! "$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
     -fno-sanitize-recover=undefined -I"$root/include" \
     "$root/tests/fuzz/config_fuzz.cpp" "$root/src/config.cpp" $deps -o "$work/config_fuzz"; then
  echo "run_fuzz: building the fuzz target failed" >&2
  exit 1
fi

corpus="$work/corpus"
mkdir -p "$corpus" "$work/artifacts"
cp "$root"/configs/*.yaml "$corpus"/
# A few hostile seeds, so the run starts at the edges the loader guards.
printf ','                        >"$corpus/stray_comma"
printf '[[[[[[[[[[[[[[[[[[[[[['   >"$corpus/deep"
printf 'model: m\0\n'             >"$corpus/nul"
printf 'a: &a [x]\nb: *a\n'       >"$corpus/alias"

echo "run_fuzz: fuzzing for ${seconds}s"
"$work/config_fuzz" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=8192 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 2>&1 | tail -n 40
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo "run_fuzz: FINDING (exit $rc); reproducer(s): $(ls "$work"/artifacts/ 2>/dev/null | tr '\n' ' ')" >&2
  for f in "$work"/artifacts/*; do [ -f "$f" ] && { echo "--- $f (base64):"; base64 "$f" | head -c 2000; echo; }; done
  exit 1
fi
echo "run_fuzz: no finding in ${seconds}s"
