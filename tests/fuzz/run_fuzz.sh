#!/usr/bin/env bash
# Builds one libFuzzer target with clang++ (-fsanitize=fuzzer,address,undefined) and runs it for a bounded
# time on a seed corpus. Exits non-zero on a finding, and also when the fuzzer runtime is missing (a skipped
# fuzz run must not read as a pass).
#
#   tests/fuzz/run_fuzz.sh TARGET [SOURCE_ROOT] [WORK_DIR]
#   MSTAR_FUZZ_SECONDS=600 tests/fuzz/run_fuzz.sh safetensors_fuzz     # a longer run (default 20 s)
#
# Targets (each a meson test of suite fuzz):
#   config_fuzz       the YAML loader (src/config.cpp); seeds: configs/*.yaml
#   safetensors_fuzz  the safetensors reader (examples/qwen3_tts/checkpoint/safetensors.cpp); seeds: small
#                     files written below, two cut from the tiny06 fixture checkpoint
#   json_fuzz         config.json and speech_tokenizer/config.json as the checkpoint loader reads them, and the
#                     codes file of `qwen3tts decode --codes` (json_file.cpp, talker_config.cpp, codec_config.cpp,
#                     codes_json.cpp); seeds: the tiny06 fixture's configs and codes files written below
#   text_fuzz         the text tokenizer of what an HTTP client sends (examples/qwen3_tts/text, over tiny06's
#                     vocab.json and merges.txt); seeds: 200 texts of the tokenizer's parity corpus and a few
#                     invalid UTF-8 sequences
set -uo pipefail
target=${1:-config_fuzz}
root=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
work=${3:-$(mktemp -d)}
seconds=${MSTAR_FUZZ_SECONDS:-20}
cxx=${MSTAR_FUZZ_CXX:-clang++}
mkdir -p "$work"
say() { echo "run_fuzz[$target]: $*"; }

if ! command -v "$cxx" >/dev/null 2>&1; then
  say "$cxx not found: bash scripts/setup.sh --fuzz installs clang and its fuzzer runtime" >&2
  exit 1
fi
# The fuzzer runtime lives in libclang-rt-14-dev; without it the link below fails. Check first so
# the message says what is missing.
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  >"$work/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer "$work/probe.cpp" -o "$work/probe" 2>"$work/probe.log"; then
  say "$cxx cannot link a libFuzzer target (-fsanitize=fuzzer): the fuzzer runtime is missing." >&2
  say "install it: bash scripts/setup.sh --fuzz (Debian 12: libclang-rt-14-dev)." >&2
  sed 's/^/  /' "$work/probe.log" >&2
  exit 1
fi

q=$root/examples/qwen3_tts
fixture=$root/tests/fixtures/qwen3tts/tiny06
case "$target" in
  config_fuzz)
    pkgs="yaml-cpp fmt"
    sources=("$root/src/config.cpp")
    includes=(-I"$root/include")
    max_len=8192 ;;
  safetensors_fuzz)
    pkgs="nlohmann_json"
    sources=("$q/checkpoint/safetensors.cpp")
    includes=(-I"$root/examples")
    max_len=65536 ;;
  json_fuzz)
    pkgs="nlohmann_json"
    sources=("$q/checkpoint/json_file.cpp" "$q/talker/talker_config.cpp" "$q/codec/codec_config.cpp"
             "$q/codec/codes_json.cpp")
    includes=(-I"$root/examples" -I"$q/talker" -I"$q/codec")
    max_len=16384 ;;
  text_fuzz)
    pkgs="nlohmann_json libutf8proc"
    sources=("$q/text/tokenizer.cpp" "$q/text/pretokenize.cpp")
    includes=(-I"$q/text")
    export MSTAR_FUZZ_TOKENIZER=$fixture
    max_len=4096 ;;
  *)
    echo "run_fuzz: unknown target '$target' (known: config_fuzz, safetensors_fuzz, json_fuzz, text_fuzz)" >&2
    exit 2 ;;
esac

# shellcheck disable=SC2086
deps=$(pkg-config --cflags --libs $pkgs) || { say "pkg-config finds no $pkgs" >&2; exit 1; }
say "building $work/$target"
# shellcheck disable=SC2086
if ! "$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
     -fno-sanitize-recover=undefined "${includes[@]}" \
     "$root/tests/fuzz/$target.cpp" "${sources[@]}" $deps -o "$work/$target"; then
  say "building the fuzz target failed" >&2
  exit 1
fi

corpus="$work/corpus"
rm -rf "$corpus"
mkdir -p "$corpus" "$work/artifacts"
case "$target" in
  config_fuzz)
    cp "$root"/configs/*.yaml "$corpus"/
    # A few hostile seeds, so the run starts at the edges the loader guards.
    printf ','                        >"$corpus/stray_comma"
    printf '[[[[[[[[[[[[[[[[[[[[[['   >"$corpus/deep"
    printf 'model: m\0\n'             >"$corpus/nul"
    printf 'a: &a [x]\nb: *a\n'       >"$corpus/alias" ;;
  safetensors_fuzz)
    # Small valid files (each dtype family, metadata, an empty tensor, tensors cut from the fixture checkpoint)
    # and hostile ones at the edges the reader guards.
    python3 - "$corpus" "$fixture" <<'PY' || { say "writing the seed corpus failed" >&2; exit 1; }
import json, struct, sys
out, fixture = sys.argv[1], sys.argv[2]
def image(header, data, raw=None):
    h = raw if raw is not None else json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data
def put(name, b):
    open(f"{out}/{name}", "wb").write(b)
def cut(src, keep, name):
    # The first `keep` tensors of a fixture file (by offset), renumbered from 0: a valid file of a few KiB.
    b = open(src, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); data = b[8 + n:]
    tensors = sorted(((k, v) for k, v in h.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"])
    new, blob = {k: v for k, v in h.items() if k == "__metadata__"}, b""
    for k, v in tensors:
        lo, hi = v["data_offsets"]
        if hi - lo > 4096: continue
        new[k] = dict(v, data_offsets=[len(blob), len(blob) + hi - lo]); blob += data[lo:hi]
        if len(new) > keep: break
    put(name, image(new, blob))
cut(f"{fixture}/expected/codec.safetensors", 4, "fixture_codec")
cut(f"{fixture}/speech_tokenizer/model.safetensors", 4, "fixture_speech_tokenizer")
put("mixed", image({"__metadata__": {"format": "pt"},
                    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8, 16]},
                    "c": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]},
                    "d": {"dtype": "F16", "shape": [3], "data_offsets": [24, 30]},
                    "e": {"dtype": "U8", "shape": [0, 5], "data_offsets": [30, 30]},
                    "f": {"dtype": "I32", "shape": [], "data_offsets": [30, 34]}}, bytes(range(34))))
put("empty_header", image({}, b""))
put("truncated", b"\x05\x00\x00")
put("header_past_end", struct.pack("<Q", 1 << 40) + b"{}")
put("overlap", image({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                      "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, bytes(6)))
# An overlap with an empty tensor sorted between the two (a finding of this fuzzer's, now refused).
put("overlap_past_empty", image({"long": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},
                                 "empty": {"dtype": "U8", "shape": [0, 5], "data_offsets": [12, 12]},
                                 "inner": {"dtype": "I32", "shape": [], "data_offsets": [12, 16]}}, bytes(32)))
put("past_data", image({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)))
put("unknown_dtype", image({"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, bytes(1)))
put("shape_mismatch", image({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8)))
put("big_shape", image({"a": {"dtype": "U8", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}}, b""))
put("duplicate", image(None, bytes(2), raw=b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                          b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'))
put("bad_json", image(None, b"", raw=b'{"a":{"dtype":"F32",'))
PY
    ;;
  json_fuzz)
    cp "$fixture/config.json" "$corpus/talker_config.json"
    cp "$fixture/speech_tokenizer/config.json" "$corpus/codec_config.json"
    python3 - "$corpus" "$fixture" <<'PY' || { say "writing the seed corpus failed" >&2; exit 1; }
import json, sys
out, fixture = sys.argv[1], sys.argv[2]
def put(name, text):
    open(f"{out}/{name}", "w").write(text)
# What `qwen3tts --dump-codes` writes: a few of the fixture's frames (16 codebooks), and two frames of a
# 2-codebook, 4-code codec (the target also reads every input as that).
frames = json.load(open(f"{fixture}/expected/talker.json"))["prompts"][0]["codes"][:3]
put("codes16.json", json.dumps({"frames": frames}))
put("codes2.json", '{"frames": [[0, 3], [2, 1]]}')
put("codes_eos.json", '{"frames": [[0, 4]]}')
put("codes_float.json", '{"frames": [[0, 1.5]]}')
put("codes_big.json", '{"frames": [[0, 18446744073709551615], [-9223372036854775808, 0]]}')
put("deep.json", "[" * 200 + "]" * 200)
put("int_range.json", '{"decoder_config": {"codebook_dim": 4294967298}, "talker_config": {"hidden_size": 4294967328}}')
PY
    ;;
  text_fuzz)
    python3 - "$corpus" "$root/tests/fixtures/qwen3tts/text/corpus.jsonl" <<'PY' || { say "writing the seed corpus failed" >&2; exit 1; }
import json, sys
out, corpus = sys.argv[1], sys.argv[2]
lines = open(corpus, encoding="utf-8").read().splitlines()
for i, line in enumerate(lines[:: max(1, len(lines) // 200)][:200]):
    open(f"{out}/text{i:03d}", "wb").write(json.loads(line)["text"].encode("utf-8"))
for name, b in {"bad_lead": b"ab\xffcd", "cut_sequence": b"caf\xc3", "surrogate": b"\xed\xa0\x80",
                "overlong": b"\xc0\xaf", "special": "<|im_end|>x<tts_pad>".encode()}.items():
    open(f"{out}/{name}", "wb").write(b)
PY
    ;;
esac

say "fuzzing for ${seconds}s"
"$work/$target" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len="$max_len" \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 2>&1 | tee "$work/fuzz.log" | tail -n 40
rc=${PIPESTATUS[0]}
# The last status line: coverage (cov), features (ft) and corpus size (corp) reached.
say "$(grep -E '^#[0-9]+' "$work/fuzz.log" | tail -n 1)"
if [ "$rc" -ne 0 ]; then
  say "FINDING (exit $rc); reproducer(s): $(ls "$work"/artifacts/ 2>/dev/null | tr '\n' ' ')" >&2
  for f in "$work"/artifacts/*; do [ -f "$f" ] && { echo "--- $f (base64):"; base64 "$f" | head -c 2000; echo; }; done
  exit 1
fi
say "no finding in ${seconds}s"
