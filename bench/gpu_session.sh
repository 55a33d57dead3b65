#!/usr/bin/env bash
# Every GPU-side check and measurement of the project, for a lent GPU machine, in stages, a few to a device call
# (one call may run 10 minutes):
#
#   reference  the reference implementation's speed at the real sizes (bench/reference/qwen_tts_reference.py:
#              qwen-tts 0.1.1 + transformers 4.57.3, carried as wheels in .whl/; about 2 minutes)
#   talker     the CUDA Talker's GPU tests, memcheck and real-size bench (examples/qwen3_tts/talker/run_gpu.sh;
#              at most 6 minutes, building included)
#   speech     the real model through the engine on the CUDA backend (CUDA Talker, CUDA codec):
#              mstar_speech_gpu_tests (fixture codes against the reference's, audio against the reference
#              decoder's for the codes made, cancellations, requests moving between rows; the state tests under
#              memcheck), then `qwen3tts synth` on a fixture with --device host and --device cuda, greedy, codes
#              and the audio of the frames both made compared (reuses the talker stage's build directory; about 4
#              minutes, building included)
#   suite      the whole test suite with the CUDA sources (scripts/gpu_suite.sh; reuses the talker stage's
#              build directory on a warm machine)
#   codec      the CUDA codec decoder's GPU tests (mstar_codec_gpu_tests: the fixtures' audio, the host decoder's
#              state), its two batched-step tests under compute-sanitizer memcheck, and its step time at the
#              released size (qwen3tts_codec_bench: eager and graph, each math: double, f32, TF32, fp16, and TF32 with
#              CUTLASS's convolutions where the build has CUTLASS: carry third_party/cutlass), and the
#              Talker's decode step alone against beside the codec (qwen3tts_beside_bench); same build directory
#              as the talker stage; about 3 minutes
#   compare    mstar in process and through its server on one random-weight checkpoint of the real 0.6B size
#   large      the 1.7B model end to end in process (random weights at the released sizes; c = 1, 16, 64, lane
#              auto; MSTAR_LARGE_C, _LANES; about 2 minutes)
#   peers      the reference and faster-qwen3-tts on that checkpoint, then the table and ratios (both below;
#              carry .whl, filled by `bash bench/reference/peers.sh wheels`)
#   gputests   the real model's three GPU test programs and the codec graph test under memcheck (about 3 minutes;
#              MSTAR_GPUTESTS_MEMCHECK=0 leaves memcheck out: about 40 s)
#   profile    ncu's per-kernel time of one decode step of the 0.6B Talker at 1 and 64 rows (about 2 minutes;
#              MSTAR_PROFILE_CLOCKS=none: clocks and caches as they run, for this stage and the next)
#   codec_profile  the same for one codec step at the released size, 8 frames a row, at 8 and 64 rows
#   attention  the decode step with the Talker's decode attention in equal shares and in chunks of N tokens
#              (qwen3tts_talker_bench --attention-chunk), 1-64 rows, contexts of 256 and 1024 tokens (about 2 minutes)
#   flashinfer the Talker's decode attention (one launch: q/k norm, RoPE, append, attention) against FlashInfer's batch
#              decode over the same paged cache, 1-128 rows, contexts of 17, 256 and 1024 tokens, with the HBM floor
#              and whether each gives a row the same bits alone and among others (qwen3tts_attention_bench: in the
#              carried build, or built here where third_party/flashinfer is carried; a minute); MSTAR_FLASHINFER_ARGS
#              other arguments
#   attention_profile  ncu's sections (speed of light, occupancy, launch, warp states, memory) of our decode attention
#              and FlashInfer's (with its plan, then in one block a row) at 64 rows and 1 row of 256 tokens (the
#              flashinfer stage's bench; MSTAR_ATTENTION_PROFILE_ROWS; about a minute)
#   persistent the code predictor's chain of products (weights only) as a graph of kernels, with PDL, as one
#              cooperative persistent kernel, and as one streaming its weights into shared memory ahead of the
#              grid's barriers, 1-8 rows, against the HBM floor (mstar_persistent_chain_bench; a minute)
#   decode     the Talker's decode step at 1..128 rows, 0.6B and 1.7B, with the defaults (the small-rows GEMV on the
#              tensor cores from 2 to 32 rows, few-tile products split among 4 blocks, the norms after the o and down
#              projections done by them up to 8 rows), on the tensor cores up to 16 and 64 rows (--gemv-rows), without
#              the split (--gemv-k-split 1), with the norms after the projections up to 0, 16 and 64 rows
#              (--gemv-norm-after 0, 16 and 64), with the CUDA-core GEMV up
#              to 8 rows and with cuBLAS only (--gemv-tensor-cores 0, --gemv-rows 8 and 0), and at 1 and 2 rows with the
#              norms in the CUDA-core GEMV and apart (--gemv-norm 1 and 0; about 5 minutes); MSTAR_DECODE_SIZES, _ROWS
#              and _ARMS (of default, tc16, tc64, split1, after0, after16, after64, cuda8, cublas; default all) pick
#              fewer;
#              MSTAR_DECODE_BENCH a carried bench instead of a build here, MSTAR_DECODE_BASELINE one to run first
#   prefill    the prefill step (the Talker over every row's 40-token prompt, then the code predictor's frame 0) at
#              1, 16 and 64 rows, 0.6B: its GPU time and how long the call holds the host, and the decode step at
#              those rows, each greedy and sampled, each with ordinary and programmatic dependent launches
#              (qwen3tts_talker_bench --prefill-tokens, --sample, --pdl; MSTAR_PREFILL_SIZES, _ROWS, _TOKENS, _PDL;
#              about 2 minutes)
#   diagnose   where the real model's time goes under load: the beside bench (decode step alone, beside the codec,
#              at both Talker stream priorities; the service's codec math and cuBLAS fp16), `qwen3tts loadgen
#              --trace` at c = 1, 16 and 64 (lane on; c = 64 also lane off and TF32) read by
#              bench/reference/trace_summary.py, and the server at c = 16 and 64 through loadgen-http (about 5
#              minutes, building included);
#              MSTAR_DIAGNOSE_ARMS="c,lane[,math] ..." picks the loadgen arms, MSTAR_DIAGNOSE_WAVES (default 2) the
#              waves of c requests each measures, MSTAR_DIAGNOSE_BESIDE=0 leaves the beside bench out
#   codecwait  end to end (qwen3tts loadgen, the compare stage's checkpoint, c = 1, 16, 64): lane on and auto, with
#              the codec's wait for rows (--codec-min-batch 8, 10 ms) and without, and one codec step for every
#              width (--codec-batching all); MSTAR_CODECWAIT_ARMS ("flags|flags|...") and
#              MSTAR_CODECWAIT_C choose others (about 3 minutes with the checkpoint)
#   split      the split topology on one GPU (the lane study's table: colocated lane off/on/auto and split
#              at c = 8, 32, 128, the edge's host and copy time) and the edge's GPU test
#   carried    the tests of a build made on the build machine (scripts/carry_build.sh; carry build-carry), run here
#              without building: unpacked at its own path, its suites gpu, host and parity (MSTAR_CARRIED_SUITES)
#              by scripts/run_built_tests.py, the GPU test programs beside the host ones; then the small_gemv and
#              norm tests of mstar_talker_gpu_tests under memcheck (about 3 minutes)
#   branches   branches against main in one call: the decode step of main's carried bench and of each carried
#              branch (build-carry/branch-NAME.tar.xz, packed by scripts/carry_branch.sh: its qwen3tts_talker_bench
#              and mstar_talker_gpu_tests) in turn, MSTAR_BRANCHES_ROUNDS rounds (default 2), with
#              MSTAR_BRANCHES_BENCH's arguments (default --model 0.6b --rows 1,2,4,8,16,32 --iters 30), and a table
#              of each branch's step over main's, row by row and round by round; then each branch's talker GPU tests
#              (and, under memcheck, the cases MSTAR_BRANCHES_MEMCHECK names: a doctest --test-case filter).
#              MSTAR_BRANCHES="a;b:--flag N" picks the branches and gives one its own extra arguments (default:
#              every carried branch). Needs main's carried build (scripts/carry_build.sh). Whatever would not fit in
#              MSTAR_BRANCHES_S seconds (default 540) is left out and named in the summary
#   ab         two (or more) builds of one program run in turn, MSTAR_AB_ROUNDS (default 2) rounds, so that a change
#              is measured against its baseline in one call: MSTAR_AB_BINS names the binaries (built on the build
#              machine at the two commits and carried, e.g. "build-carry/qwen3tts_talker_bench_old
#              build-carry/qwen3tts_talker_bench"), MSTAR_AB_ARGS their arguments; each run's RESULT and "| mstar"
#              lines are printed under its binary's name. Loadgen runs (qwen3tts) take the compare stage's
#              checkpoint, written when missing (carry .whl): MSTAR_AB_ARGS may say CKPT for its folder
#
#   MSTAR_AB_BINS="build-carry/qwen3tts_talker_bench_old build-carry/qwen3tts_talker_bench" \
#     MSTAR_AB_ARGS="--model 0.6b --rows 1,8,16 --iters 50" bash bench/gpu_session.sh ab
#
#   run(command="bash bench/gpu_session.sh reference talker", carry=[".whl"], kind="nvidia-h200", timeout_s=600)
#   run(command="bash bench/gpu_session.sh speech", kind="nvidia-h200", timeout_s=600)  # same warm machine
#   run(command="bash bench/gpu_session.sh suite", kind="nvidia-h200", timeout_s=600)   # same warm machine
#   run(command="bash bench/gpu_session.sh codec", kind="nvidia-h200", timeout_s=600)   # alone, or before suite
#
# A carried build: where build-carry/build.tar.xz is there (scripts/carry_build.sh BUILD_DIR on the build machine,
# then carry build-carry), every stage runs its programs instead of building here (a CUDA build takes minutes of a
# call): it is unpacked once at the build directory's own path, build-talker-gpu becomes a link to it, and stage
# suite runs its tests as stage carried does, every suite. MSTAR_CARRIED_BUILD=0 builds here instead; so does a
# build-talker-gpu that is a folder of its own (a build made here is kept).
#
#   run(command="bash bench/gpu_session.sh carried codec split", carry=["build-carry"], timeout_s=600)
#
# .whl/ (ignored by git) is filled here, on a machine with pip's registry, by `bash bench/gpu_session.sh wheels`.
# Each stage's logs are packed into $OUT/<stage>.tgz (the device tool brings back at most 8 files); a table
# of what each stage printed last ends the output.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-/tmp/gpu_session}
mkdir -p "$out"
summary=()

# A build made on the build machine and carried (build-carry/build.tar.xz, written by scripts/carry_build.sh) stands
# in for build-talker-gpu, so that no stage builds here: unpacked once at the build directory's own path (its
# programs and tests name it), the source tree's path linked to this tree, build-talker-gpu a link to it, and
# LD_LIBRARY_PATH set for the shared libraries carried with it. Returns 0 when build-talker-gpu is the carried build;
# 1 when there is none to use (no build-carry/build.tar.xz, MSTAR_CARRIED_BUILD=0, or build-talker-gpu is a build
# made here, which is kept); 2, with a summary line naming stage $1, when it cannot be used.
adopt_carried_build() {
  local stage=$1 b src sum
  [ "${MSTAR_CARRIED_BUILD:-1}" = 1 ] && [ -f build-carry/build.tar.xz ] && [ -f build-carry/BUILD ] || return 1
  [ -e build-talker-gpu ] && [ ! -L build-talker-gpu ] && return 1
  read -r b src < build-carry/BUILD
  sum=$(md5sum < build-carry/build.tar.xz | cut -d' ' -f1)
  if [ "$(cat "$b/.mstar-carried" 2>/dev/null)" != "$sum" ]; then
    if [ -f "$b/build.ninja" ]; then
      summary+=("$stage: $b (build-carry/BUILD) is a build directory of this machine's; the carried build was not unpacked over it")
      return 2
    fi
    # A warm machine may hold an older carried build there: unpacked over it (its compare/ checkpoints stay).
    mkdir -p "$b" && tar -C "$b" -xJf build-carry/build.tar.xz ||
      { summary+=("$stage: cannot unpack build-carry/build.tar.xz into $b"); return 2; }
    echo "$sum" > "$b/.mstar-carried"
    echo "the carried build of $(cat build-carry/COMMIT 2>/dev/null) unpacked at $b"
  fi
  if [ ! -e "$src" ]; then
    mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"
  elif [ ! "$src" -ef "$root" ]; then
    summary+=("$stage: $src (the carried build's source tree) is another folder here; its tests would read it")
    return 2
  fi
  ln -sfn "$b" build-talker-gpu
  LD_LIBRARY_PATH=$(carried_library_path)
  export LD_LIBRARY_PATH
}

# Makes the given targets of build-talker-gpu; $1 names the stage and $2 its log folder, where setup.log and
# build.log go. With a carried build (adopt_carried_build) the targets must be there already; otherwise
# build-talker-gpu is configured (CUDA on, release) where it is not yet and the targets built. Fails, with a summary
# line, when a target is missing or a step fails.
build_gpu() {
  local stage=$1 d=$2 b=build-talker-gpu t rc
  shift 2
  adopt_carried_build "$stage"
  rc=$?
  if [ "$rc" -eq 0 ]; then
    for t in "$@"; do
      [ -x "$b/$t" ] ||
        { summary+=("$stage: the carried build ($(cat build-carry/COMMIT 2>/dev/null)) has no $t"); return 1; }
    done
    return 0
  fi
  [ "$rc" -eq 1 ] || return 1
  if [ ! -f "$b/build.ninja" ]; then
    meson setup "$b" -Dgpu=enabled --buildtype=release > "$d/setup.log" 2>&1 ||
      { tail -30 "$d/setup.log"; summary+=("$stage: meson setup failed ($stage/setup.log)"); return 1; }
  fi
  ninja -C "$b" -j"$(nproc)" "$@" > "$d/build.log" 2>&1 ||
    { tail -40 "$d/build.log"; summary+=("$stage: the build failed ($stage/build.log)"); return 1; }
}

# Appends to the summary each line of file $2 that starts with the pattern $3 (grep -E; default RESULT, a word
# that is dropped), after the prefix $1.
summarize() {
  local prefix=$1 file=$2 pattern=${3:-RESULT}
  while read -r line; do summary+=("  $prefix$line"); done < <(grep -E "^$pattern" "$file" | sed 's/^RESULT //')
}

# qwen3tts_talker_bench of the build directory with the other arguments, its output in $1.
talker_bench() {
  local log=$1
  shift
  timeout 120 build-talker-gpu/examples/qwen3_tts/talker/qwen3tts_talker_bench "$@" > "$log" 2>&1
}

stage_wheels() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    transformers==4.57.3 huggingface_hub==0.36.0 tokenizers==0.22.1 qwen-tts==0.1.1
  ls -la .whl
}

# The pinned reference (qwen-tts 0.1.1, transformers 4.57.3) from the carried wheels into /tmp/site, once.
install_reference() {
  [ -f /tmp/site/.installed ] && return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/qwen_tts-*.whl .whl/transformers-*.whl .whl/huggingface_hub-*.whl .whl/tokenizers-*.whl &&
    touch /tmp/site/.installed
}

stage_reference() {
  local d="$out/reference"
  mkdir -p "$d"
  install_reference ||
    { summary+=("reference: the carried wheels did not install (carry .whl; fill it with: bash $0 wheels)"); return; }
  local py="env PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 bench/reference/qwen_tts_reference.py"
  timeout 150 $py --size 0.6b --frames 24 --batches 1,8,32,64,128 --json "$d/ref06.json" 2>&1 |
    grep -v pad_token_id | tee "$d/ref06.log"
  timeout 90 $py --size 1.7b --frames 24 --batches 1,64 --codec-batches 1 --json "$d/ref17.json" 2>&1 |
    grep -v pad_token_id | tee "$d/ref17.log"
  summary+=("reference 0.6b: $(grep -c '^generate' "$d/ref06.log") generate rows, 1.7b: $(grep -c '^generate' "$d/ref17.log")")
}

stage_talker() {
  adopt_carried_build talker
  [ $? -eq 2 ] && return
  OUT="$out/talker" bash examples/qwen3_tts/talker/run_gpu.sh
  summary+=("talker: run_gpu.sh exit $?")
}

stage_speech() {
  local d="$out/speech" build=build-talker-gpu fixture=tests/fixtures/qwen3tts/tiny06
  mkdir -p "$d"
  build_gpu speech "$d" tests/gpu/mstar_speech_gpu_tests examples/qwen3tts || return
  timeout 240 "$build/tests/gpu/mstar_speech_gpu_tests" --no-intro > "$d/tests.log" 2>&1
  local rc=$?
  cat "$d/tests.log"
  local san=skipped
  if command -v compute-sanitizer > /dev/null; then
    # The Talker's state gather/scatter and frame output (the direct talker_cuda test), and the codec decoding
    # in place in the engine's codec_state slots with its audio copied out (the engine's moving-rows test).
    timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 "$build/tests/gpu/mstar_speech_gpu_tests" \
      --no-intro --test-case='*Talker state follows it*' > "$d/memcheck.log" 2>&1
    san=$?
    tail -5 "$d/memcheck.log"
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$build/tests/gpu/mstar_speech_gpu_tests" \
      --no-intro --test-case='*codec state follows it*' > "$d/memcheck_codec.log" 2>&1
    san="$san/$?"
    tail -5 "$d/memcheck_codec.log"
  fi
  local dev
  for dev in host cuda; do
    timeout 90 "$build/examples/qwen3tts" synth --model "$fixture" --text-ids 101,202,303,44,55,66,77 \
      --speaker vivian --language auto --greedy --max-frames 40 --device "$dev" --float --out "$d/$dev.wav" \
      --dump-codes "$d/$dev.json" >> "$d/synth.log" 2>&1 || echo "synth --device $dev: exit $?" >> "$d/synth.log"
  done
  cat "$d/synth.log"
  local same
  # The decoder is causal, so the audio of the frames both made must agree (host decoder against CUDA codec).
  same=$(python3 - "$d/host.json" "$d/cuda.json" "$d/host.wav" "$d/cuda.wav" <<'PY'
import array, json, struct, sys
def samples(path):  # a float32 WAV's data chunk
    b = open(path, "rb").read()
    at = 12
    while at + 8 <= len(b):
        tag, n = b[at:at + 4], struct.unpack("<I", b[at + 4:at + 8])[0]
        if tag == b"data":
            return array.array("f", b[at + 8:at + 8 + n])
        at += 8 + n + (n & 1)
    raise ValueError(f"{path}: no data chunk")
try:
    a, b = (json.load(open(p))["frames"] for p in sys.argv[1:3])
    x, y = samples(sys.argv[3]), samples(sys.argv[4])
except Exception as e:
    print(f"unreadable ({e})"); sys.exit()
n = next((i for i, (u, v) in enumerate(zip(a, b)) if u != v), min(len(a), len(b)))
spf = len(x) // max(len(a), 1)
err = max((abs(u - v) for u, v in zip(x[:n * spf], y[:n * spf])), default=0.0)
verdict = "ok" if err <= 1e-4 else "OVER 1e-4"
print(f"{n} of {len(a)} host frames identical on cuda ({len(b)} frames); their audio within {err:.3g} ({verdict})")
PY
)
  local cases
  cases=$(grep -E 'test cases:' "$d/tests.log" | tail -1 | tr -s ' ')
  summary+=("speech: mstar_speech_gpu_tests rc $rc ($cases), memcheck rc $san; synth: $same")
}

# With a carried build, its tests of every suite through stage carried's runner (no meson here); else the whole
# suite built and run here.
stage_suite() {
  adopt_carried_build suite
  case $? in
    0) MSTAR_CARRIED_SUITES=${MSTAR_CARRIED_SUITES:-all} stage_carried suite
      return ;;
    2) return ;;
  esac
  OUT="$out/suite" MSTAR_BUILD_DIR=build-talker-gpu MSTAR_SKIP_SETUP=1 timeout 560 bash scripts/gpu_suite.sh
  summary+=("suite: $(tail -n1 "$out/suite/summary.txt" 2>/dev/null || echo 'no summary')")
}

stage_codec() {
  local d="$out/codec" b=build-talker-gpu
  mkdir -p "$d"
  build_gpu "codec" "$d" tests/gpu/mstar_codec_gpu_tests examples/qwen3_tts/codec/qwen3tts_codec_bench || return
  timeout 120 "$b/tests/gpu/mstar_codec_gpu_tests" --no-intro 2>&1 | tee "$d/tests.log"
  local rc=${PIPESTATUS[0]} san=skipped
  if command -v compute-sanitizer > /dev/null; then
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$b/tests/gpu/mstar_codec_gpu_tests" --no-intro \
      --test-case='*rows of one*,*state after*' > "$d/memcheck.log" 2>&1
    san=$?
    tail -5 "$d/memcheck.log"
  fi
  # MSTAR_CODEC_MATHS: the maths the bench times (a comma list of codec_math_named's names; default all five, the
  # fifth, tf32-conv, where the build found CUTLASS) and the beside bench runs the codec in (default its own, auto:
  # the service's); MSTAR_CODEC_SMS: the beside bench's codec on each of these SM counts (--codec-sms, e.g. 0,32,64;
  # default the whole GPU).
  timeout 120 "$b/examples/qwen3_tts/codec/qwen3tts_codec_bench" ${MSTAR_CODEC_MATHS:+--math "$MSTAR_CODEC_MATHS"} \
    2>&1 | tee "$d/bench.log"
  local bench=${PIPESTATUS[0]} math
  build_gpu codec "$d" examples/qwen3_tts/pipeline/qwen3tts_beside_bench &&
    for math in $(echo "${MSTAR_CODEC_MATHS:-default}" | sed 's/^all$/cublas,tf32,fp16,double/' | tr ',' ' '); do
      timeout 240 "$b/examples/qwen3_tts/pipeline/qwen3tts_beside_bench" --iters 20 \
        ${MSTAR_CODEC_SMS:+--codec-sms "$MSTAR_CODEC_SMS"} $([ "$math" != default ] && echo --codec-math "$math") 2>&1 |
        tee "$d/beside_$math.log"
      summarize "beside $math: " "$d/beside_$math.log"
    done
  summary+=("codec: GPU tests rc $rc ($(grep -E 'test cases:' "$d/tests.log" | tail -1 | tr -s ' ')), memcheck rc $san, bench rc $bench")
  summarize "codec " "$d/bench.log"
}

stage_split() {
  local d="$out/split" b=build-talker-gpu q=build-talker-gpu/examples/qwen3tts
  mkdir -p "$d"
  build_gpu "split" "$d" examples/qwen3tts tests/split/mstar_edge_gpu_test || return
  timeout 60 "$b/tests/split/mstar_edge_gpu_test" 2>&1 | tee "$d/edge.log"
  local edge=${PIPESTATUS[0]}
  timeout 200 "$q" --backend cuda --config configs/qwen3tts.yaml -c 8,32,128 --lane off,on,auto --settle \
    --no-progress --json "$d/colocated.json" > "$d/colocated.log" 2>&1
  local colo=$?
  timeout 150 "$q" --backend cuda --config configs/qwen3tts_split.yaml -c 8,32,128 --settle --no-progress \
    --json "$d/split.json" > "$d/split.log" 2>&1
  local split=$?
  grep -E "^ *(c=|  c |digest|audio digest)|edge:" "$d/colocated.log" "$d/split.log" | tail -40
  summary+=("split: edge test rc $edge, colocated rc $colo, split rc $split")
}

# The comparison with the reference (docs/benchmarks.md): one random-weight checkpoint of the real 0.6B size in the
# official layout (bench/reference/write_checkpoint.py; its generation_config.json masks the end token, so every
# request makes exactly MSTAR_COMPARE_FRAMES frames), the same text and frame count for every system, c = 1, 4,
# 16, 64 (MSTAR_COMPARE_C). Two stages, for two calls on one warm machine (the checkpoint and the rows stay in
# build-talker-gpu/compare/ between them):
#   compare  builds qwen3tts, writes the checkpoint, runs mstar in process (`qwen3tts loadgen`) and through its
#            server (`qwen3tts serve` + `qwen3tts loadgen-http`), lane off / on / auto (about 6 minutes)
#   peers    the reference (qwen-tts, its own decoder included) and faster-qwen3-tts on the same checkpoint
#            (bench/reference/peers.sh; about 4 minutes), then the table and ratios of every row
#            (bench/reference/compare_table.py)
compare_dir=build-talker-gpu/compare
compare_frames=${MSTAR_COMPARE_FRAMES:-48}
compare_c=${MSTAR_COMPARE_C:-1,4,16,64}
compare_text="Hello there, this is a test of the speech server."

# The library path a binary built on the build machine and carried needs here: build-carry/lib (the shared libraries
# a bare GPU machine lacks, cpp-httplib's among them), then the CUDA libraries of the Python wheels (cuBLAS, ...).
carried_library_path() {
  local wheel_libs
  wheel_libs=$(python3 -c 'import glob, site; print(":".join(glob.glob(site.getsitepackages()[0] + "/nvidia/*/lib")))' \
    2>/dev/null)
  echo "$root/build-carry/lib:$wheel_libs:${LD_LIBRARY_PATH:-}"
}

# Sets q to a qwen3tts with the server in it: the one built on the build machine and carried (build-carry/, see
# carried_library_path) when it loads here; else one built here, which has no server where cpp-httplib is missing.
# $1 names the stage, $2 its log folder.
find_qwen3tts() {
  local stage=$1 d=$2 b=build-talker-gpu carried
  carried=$(carried_library_path)
  if [ -x build-carry/qwen3tts ] && LD_LIBRARY_PATH="$carried" build-carry/qwen3tts --help > /dev/null 2>&1; then
    export LD_LIBRARY_PATH="$carried"
    q=build-carry/qwen3tts
    echo "$stage: the carried qwen3tts (built at $(cat build-carry/COMMIT 2>/dev/null))"
    return 0
  fi
  q=$b/examples/qwen3tts
  build_gpu "$stage" "$d" examples/qwen3tts || return 1
}

# The random-weight checkpoint of size $3 (0.6b, 1.7b) in folder $4, written by peers.sh where it is not there yet;
# $1 names the stage and $2 its log folder. Fails, with a summary line, when writing it does.
ensure_checkpoint() {
  local stage=$1 d=$2 size=$3 ck=$4
  mkdir -p "$compare_dir"
  [ -f "$ck/config.json" ] && return 0
  SIZE=$size FRAMES=$compare_frames CKPT=$ck OUT=$d bash bench/reference/peers.sh checkpoint && return 0
  tail -30 "$d/checkpoint.log"
  summary+=("$stage: writing the checkpoint failed ($stage/checkpoint.log)")
  return 1
}

# `qwen3tts serve` ($1) on a free port in the background with its output in $2.out/.err and the other arguments;
# sets server_pid, and url to its address once it listens (empty when it never did).
start_server() {
  local q=$1 log=$2
  shift 2
  # English, as the in-process loadgen runs, where the server takes --language (a build before it speaks "auto").
  local language=()
  "$q" serve --help 2>/dev/null | grep -q -- '--language' && language=(--language english)
  "$q" serve --port 0 --max-queued 256 "${language[@]}" "$@" > "$log.out" 2> "$log.err" &
  server_pid=$!
  url=""
  for _ in $(seq 1 300); do
    url=$(grep -o 'http://[0-9.:]*' "$log.out" 2>/dev/null | head -1)
    [ -n "$url" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.2
  done
}

stage_compare() {
  local d="$out/compare" ck=$compare_dir/ckpt06
  local widest=${compare_c##*,}
  mkdir -p "$d"
  find_qwen3tts compare "$d" || return
  ensure_checkpoint compare "$d" 0.6b "$ck" || return
  local common=(--voice ryan --text "$compare_text")
  timeout 240 "$q" loadgen --model "$ck" --device cuda --language english "${common[@]}" -c "$compare_c" \
    --lane "${MSTAR_COMPARE_LANES:-off,on,auto}" --warmup 1 --json "$compare_dir/inproc.json" 2>&1 | tee "$d/inproc.log"
  local inproc=${PIPESTATUS[0]} http=0 lane
  # MSTAR_COMPARE_CODEC_ARMS=0 leaves out the codec variants below (a shorter call).
  if [ "${MSTAR_COMPARE_CODEC_ARMS:-1}" = 1 ]; then
    # The codec launched eagerly in float32 (the service's defaults are graphs and TF32): rows "mstar-eager-cublas".
    timeout 120 "$q" loadgen --model "$ck" --device cuda --language english "${common[@]}" -c "$compare_c" \
      --lane on --codec-eager --codec-math cublas --warmup 1 --json "$compare_dir/inproc_eager_f32.json" 2>&1 |
      tee "$d/inproc_eager_f32.log"
    inproc="$inproc, eager float32 codec ${PIPESTATUS[0]}"
  fi
  # MSTAR_COMPARE_LAZYGRAPHS=1: also in process with the Talker's decode graphs captured when a row count first
  # comes to a step (--talker-graphs-lazy; the service captures them all at start): rows "mstar-lazygraphs".
  if [ "${MSTAR_COMPARE_LAZYGRAPHS:-0}" = 1 ]; then
    timeout 240 "$q" loadgen --model "$ck" --device cuda --language english "${common[@]}" -c "$compare_c" \
      --lane "${MSTAR_COMPARE_LANES:-off,on,auto}" --talker-graphs-lazy --warmup 1 \
      --json "$compare_dir/inproc_lazygraphs.json" 2>&1 | tee "$d/inproc_lazygraphs.log"
    inproc="$inproc, Talker graphs lazily ${PIPESTATUS[0]}"
  fi
  # MSTAR_COMPARE_NOPDL=1: also in process with the Talker's kernels launched ordinarily (--talker-no-pdl; the
  # service launches them with programmatic dependent launch): rows "mstar-nopdl".
  if [ "${MSTAR_COMPARE_NOPDL:-0}" = 1 ]; then
    timeout 240 "$q" loadgen --model "$ck" --device cuda --language english "${common[@]}" -c "$compare_c" \
      --lane "${MSTAR_COMPARE_LANES:-off,on,auto}" --talker-no-pdl --warmup 1 \
      --json "$compare_dir/inproc_nopdl.json" 2>&1 | tee "$d/inproc_nopdl.log"
    inproc="$inproc, ordinary launches ${PIPESTATUS[0]}"
  fi
  # MSTAR_COMPARE_CODEC_SMS=N: also in process with the codec confined to N SMs (--codec-sms): rows
  # "mstar-codec<N>sm".
  if [ -n "${MSTAR_COMPARE_CODEC_SMS:-}" ]; then
    timeout 240 "$q" loadgen --model "$ck" --device cuda --language english "${common[@]}" -c "$compare_c" \
      --lane "${MSTAR_COMPARE_LANES:-off,on,auto}" --codec-sms "$MSTAR_COMPARE_CODEC_SMS" --warmup 1 \
      --json "$compare_dir/inproc_codec_sms.json" 2>&1 | tee "$d/inproc_codec_sms.log"
    inproc="$inproc, codec on $MSTAR_COMPARE_CODEC_SMS SMs ${PIPESTATUS[0]}"
  fi
  # MSTAR_COMPARE_CODEC_MATH=M: also in process with the codec's sums in math M (--codec-math, e.g. cublas): rows
  # "mstar-M".
  if [ -n "${MSTAR_COMPARE_CODEC_MATH:-}" ]; then
    timeout 240 "$q" loadgen --model "$ck" --device cuda --language english "${common[@]}" -c "$compare_c" \
      --lane "${MSTAR_COMPARE_LANES:-off,on,auto}" --codec-math "$MSTAR_COMPARE_CODEC_MATH" --warmup 1 \
      --json "$compare_dir/inproc_codec_math.json" 2>&1 | tee "$d/inproc_codec_math.log"
    inproc="$inproc, codec math $MSTAR_COMPARE_CODEC_MATH ${PIPESTATUS[0]}"
  fi
  # MSTAR_COMPARE_HTTP_LANES: the server's lane modes to load (default all three).
  for lane in ${MSTAR_COMPARE_HTTP_LANES:-off on auto}; do
    start_server "$q" "$d/serve_$lane" --model "$ck" --lane "$lane" --max-live "$widest" --max-batch "$widest"
    if [ -z "$url" ]; then
      tail -5 "$d/serve_$lane.err"; http=1
    else
      timeout 240 "$q" loadgen-http --url "$url" "${common[@]}" -c "$compare_c" --warmup 1 \
        --json "$compare_dir/http_$lane.json" 2>&1 | tee "$d/http_$lane.log"
      [ "${PIPESTATUS[0]}" -eq 0 ] || http=1
      curl -s "$url/metrics" > "$d/metrics_$lane.txt" 2>/dev/null
    fi
    kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null
  done
  cp "$compare_dir"/*.json "$d/" 2>/dev/null
  python3 bench/reference/compare_table.py "$compare_dir" > "$d/table.md"
  summary+=("compare: in process rc $inproc, http rc $http (compare/table.md; the peers come in stage peers)")
}

# The 1.7B model end to end, in process: a random-weight checkpoint of the released 1.7B sizes, loaded at
# c = 1, 16 and 64 with the compare stage's texts and frame counts (mstar only: the peers run the 0.6B).
stage_large() {
  local d="$out/large" ck=$compare_dir/ckpt17
  mkdir -p "$d"
  find_qwen3tts large "$d" || return
  ensure_checkpoint large "$d" 1.7b "$ck" || return
  timeout 200 "$q" loadgen --model "$ck" --device cuda --language english --voice ryan --text "$compare_text" \
    -c "${MSTAR_LARGE_C:-1,16,64}" --lane "${MSTAR_LARGE_LANES:-auto}" --warmup 1 --json "$d/inproc17.json" 2>&1 |
    tee "$d/inproc.log"
  summary+=("large: 1.7B in process rc ${PIPESTATUS[0]}")
  summarize "" "$d/inproc.log" '\| mstar'
}

stage_peers() {
  local d="$out/peers" ck=$compare_dir/ckpt06
  mkdir -p "$d"
  [ -f "$ck/config.json" ] || { summary+=("peers: no checkpoint in $ck: run stage compare first"); return; }
  SIZE=0.6b FRAMES=$compare_frames CKPT=$ck OUT=$d TEXT=$compare_text REF_N=${MSTAR_COMPARE_REF_N:-2,4,16,64} \
    bash bench/reference/peers.sh reference faster
  cp "$d/reference.json" "$d/faster.json" "$compare_dir/" 2>/dev/null
  python3 bench/reference/compare_table.py "$compare_dir" | tee "$d/table.md"
  summary+=("peers: reference $(test -s "$d/reference.json" && echo ok || echo MISSING), faster $(test -s \
    "$d/faster.json" && echo ok || echo MISSING) (peers/table.md)")
  summarize "" "$d/table.md" RATIO
}

# The real model's GPU tests alone (the Talker against the fixtures, the codec and its graphs, the model through
# the engine), and the codec's graph test under memcheck: a short check of the model's CUDA code when the whole
# suite does not fit the call.
stage_gputests() {
  local d="$out/gputests" b=build-talker-gpu t rc all=""
  mkdir -p "$d"
  build_gpu "gputests" "$d" tests/gpu/mstar_talker_gpu_tests tests/gpu/mstar_codec_gpu_tests \
    tests/gpu/mstar_speech_gpu_tests || return
  for t in talker codec speech; do
    timeout 240 "$b/tests/gpu/mstar_${t}_gpu_tests" --no-intro > "$d/$t.log" 2>&1
    rc=$?
    tail -4 "$d/$t.log"
    all+=" $t rc $rc ($(grep -E 'test cases:' "$d/$t.log" | tail -1 | tr -s ' '))"
  done
  if [ "${MSTAR_GPUTESTS_MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$b/tests/gpu/mstar_codec_gpu_tests" --no-intro \
      --test-case='*graph*' > "$d/memcheck_graph.log" 2>&1
    rc=$?
    tail -4 "$d/memcheck_graph.log"
    all+="; codec graph memcheck rc $rc"
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$b/tests/gpu/mstar_talker_gpu_tests" --no-intro \
      --test-case='small_gemv*,*fused attention*,*norms done by the products*,programmatic*' > "$d/memcheck_talker.log" 2>&1
    rc=$?
    tail -4 "$d/memcheck_talker.log"
    all+="; talker gemv + fused attention + programmatic launch memcheck rc $rc"
  fi
  summary+=("gputests:$all")
}

# ncu's options for the profile stages: one metric, CSV; MSTAR_PROFILE_CLOCKS=none leaves the clocks and the caches
# as they run (ncu's default locks the clocks at base and flushes the caches before each kernel).
ncu_options() {
  echo --profile-from-start off --graph-profiling node --metrics gpu__time_duration.sum --csv --print-units base
  [ "${MSTAR_PROFILE_CLOCKS:-}" = none ] && echo --clock-control none --cache-control none
}

# A profile stage: $1 its name, $2 the bench target to build, $3 the row counts, $4 seconds a run at most, then the
# bench's arguments; each row count's run (--rows R --profile) under ncu (ncu_options) leaves ncu_rowsR.csv and
# the kernels' table kernels_rowsR.md (bench/reference/kernel_profile.py) in the stage's folder, the table printed
# and its total in the summary.
ncu_stage() {
  local stage=$1 target=$2 rows_list=$3 limit=$4 d="$out/$1" b=build-talker-gpu rows
  shift 4
  mkdir -p "$d"
  command -v ncu > /dev/null || { summary+=("$stage: no ncu on PATH"); return; }
  build_gpu "$stage" "$d" "$target" || return
  for rows in $rows_list; do
    timeout "$limit" ncu $(ncu_options) "$b/$target" "$@" --rows "$rows" --profile > "$d/ncu_rows$rows.csv" \
      2> "$d/ncu_rows$rows.err"
    python3 bench/reference/kernel_profile.py "$d/ncu_rows$rows.csv" > "$d/kernels_rows$rows.md" 2>&1
    echo "== rows $rows"; cat "$d/kernels_rows$rows.md"
    summary+=("$stage rows $rows: $(grep '^KERNELS' "$d/kernels_rows$rows.md" || echo 'no kernels read')")
  done
}

# The Talker's decode step with its fused decode attention in 8 equal shares a row (chunk 0) and in shares of at
# least N tokens (talker_cuda_limits::attention_chunk; MSTAR_ATTENTION_CHUNKS, default 0 64 128 256), 0.6B, at 1,
# 16 and 64 rows, over contexts of 256 and 1024 tokens a row (MSTAR_ATTENTION_KV); about 2 minutes.
stage_attention() {
  local d="$out/attention" kv chunk
  mkdir -p "$d"
  build_gpu "attention" "$d" examples/qwen3_tts/talker/qwen3tts_talker_bench || return
  for kv in ${MSTAR_ATTENTION_KV:-256 1024}; do
    for chunk in ${MSTAR_ATTENTION_CHUNKS:-0 64 128 256}; do
      talker_bench "$d/bench_kv${kv}_chunk$chunk.log" --model 0.6b --rows 1,16,64 --kv "$kv" --iters 50 \
        --attention-chunk "$chunk"
      summarize "kv $kv: " "$d/bench_kv${kv}_chunk$chunk.log"
    done
  done
}

# The Talker's decode attention against FlashInfer's over the same cache (see the list at the top). The bench is
# built only where FlashInfer's headers are (scripts/flashinfer.sh; carry third_party/flashinfer to build it here).
stage_flashinfer() {
  local d="$out/flashinfer" rc
  mkdir -p "$d"
  build_gpu "flashinfer" "$d" examples/qwen3_tts/talker/qwen3tts_attention_bench || return
  # shellcheck disable=SC2086 # the arguments are words
  timeout 240 build-talker-gpu/examples/qwen3_tts/talker/qwen3tts_attention_bench ${MSTAR_FLASHINFER_ARGS:-} \
    > "$d/bench.log" 2>&1
  rc=$?
  cat "$d/bench.log"
  summary+=("flashinfer: rc $rc")
  summarize "" "$d/bench.log" '( +[0-9]+ +[0-9]+ |FAILED)'
}

# Why our decode attention trails FlashInfer's at many rows: ncu's sections of the first launch of each of the
# bench's three kernels (ours in 8 shares, FlashInfer with its plan, FlashInfer in one block a row), clocks and
# caches as they run, a row count a run; the report in attention_profile/ncu_rowsR.txt, its key lines printed.
stage_attention_profile() {
  local d="$out/attention_profile" rows b=build-talker-gpu
  mkdir -p "$d"
  command -v ncu > /dev/null || { summary+=("attention_profile: no ncu on PATH"); return; }
  build_gpu "attention_profile" "$d" examples/qwen3_tts/talker/qwen3tts_attention_bench || return
  for rows in ${MSTAR_ATTENTION_PROFILE_ROWS:-64 1}; do
    timeout 120 ncu --clock-control none --kernel-name regex:"decode_attention_kernel|BatchDecodeWithPagedKVCacheKernel" \
      --launch-count 3 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis "$b/examples/qwen3_tts/talker/qwen3tts_attention_bench" --rows "$rows" \
      --kv 256 --iters 1 > "$d/ncu_rows$rows.txt" 2>&1
    echo "== attention_profile rows $rows (rc $?): ours in 8 shares, FlashInfer with its plan, FlashInfer in one block"
    grep -E "^  [a-zA-Z_]+.*\(|Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|\
Block Limit Registers|Warp Cycles Per Issued|stalled" "$d/ncu_rows$rows.txt" | sed 's/  */ /g' | cut -c1-260
    summary+=("attention_profile rows $rows: $(grep -c 'Duration' "$d/ncu_rows$rows.txt") kernels profiled")
  done
}

# Whether a persistent kernel would pay for the code predictor: its chain of products (weights only, 15 passes x 5
# layers) as a graph of kernels, with PDL, as one cooperative kernel with grid-wide barriers, and as one whose
# blocks stream their weights into shared memory ahead of the barriers, at 1-8 rows, against the HBM floor
# (bench/kernels/persistent_chain_bench.cu; under a minute).
stage_persistent() {
  local d="$out/persistent"
  mkdir -p "$d"
  build_gpu "persistent" "$d" bench/kernels/mstar_persistent_chain_bench || return
  timeout 120 build-talker-gpu/bench/kernels/mstar_persistent_chain_bench > "$d/bench.log" 2>&1
  local rc=$?
  cat "$d/bench.log"
  summary+=("persistent: rc $rc")
  summarize "" "$d/bench.log" '\| +[0-9]'
}

# Where the decode step's time goes: ncu's per-kernel GPU time of one fused decode step of the 0.6B Talker at 1
# and 64 rows (qwen3tts_talker_bench --profile), grouped by kernel.
stage_profile() { ncu_stage profile examples/qwen3_tts/talker/qwen3tts_talker_bench "1 64" 150 --model 0.6b; }

# Where the codec step's time goes: ncu's per-kernel GPU time of one eager step at the released size, 8 frames a
# row, at 8 and 64 rows (qwen3tts_codec_bench --profile; MSTAR_CODEC_MATHS, default tf32), grouped by kernel.
stage_codec_profile() {
  ncu_stage codec_profile examples/qwen3_tts/codec/qwen3tts_codec_bench "8 64" 200 --widths 8 \
    --math "${MSTAR_CODEC_MATHS:-tf32}"
}

# The decode step's time with and without the small-rows GEMV (see the list at the top).
stage_decode() {
  local d="$out/decode" size g bench=${MSTAR_DECODE_BENCH:-}
  mkdir -p "$d"
  # MSTAR_DECODE_BENCH: a qwen3tts_talker_bench built on the build machine and carried (build-carry), run instead of
  # building one here; MSTAR_DECODE_BASELINE: another (e.g. main's), run first with the default arm's flags.
  if [ -n "$bench" ]; then
    LD_LIBRARY_PATH=$(carried_library_path)
    export LD_LIBRARY_PATH
  else
    build_gpu "decode" "$d" examples/qwen3_tts/talker/qwen3tts_talker_bench || return
    bench="build-talker-gpu/examples/qwen3_tts/talker/qwen3tts_talker_bench"
  fi
  # The default (1 row on the CUDA-core small_gemv, 2-32 on the tensor cores with tiles of few-tile products shared
  # among 4 blocks and the norms after the o and down projections done by them up to 8 rows, cuBLAS beyond), then one
  # knob changed at a time: the tensor cores up to 16 and 64 rows, no split, the norms after the projections up to 0,
  # 16 and 64 rows; the CUDA-core kernel up to 8 rows, and cuBLAS everywhere. MSTAR_DECODE_ARMS names some of them
  # ("default tc64").
  local arms=("default:" "tc16:--gemv-rows 16" "tc64:--gemv-rows 64" "split1:--gemv-k-split 1"
    "after0:--gemv-norm-after 0" "after16:--gemv-norm-after 16" "after64:--gemv-rows 64 --gemv-norm-after 64"
    "cuda8:--gemv-rows 8 --gemv-tensor-cores 0" "cublas:--gemv-rows 0")
  local arm name
  for size in ${MSTAR_DECODE_SIZES:-0.6b 1.7b}; do
    if [ -n "${MSTAR_DECODE_BASELINE:-}" ]; then
      timeout 120 "$MSTAR_DECODE_BASELINE" --model "$size" --rows "${MSTAR_DECODE_ROWS:-1,2,4,8,16,32,64,128}" \
        --iters 50 > "$d/bench_${size}_baseline.log" 2>&1
      grep -E '^(device|RESULT)' "$d/bench_${size}_baseline.log" | sed 's/^/  baseline /'
      summarize "baseline " "$d/bench_${size}_baseline.log"
    fi
    for arm in "${arms[@]}"; do
      name=${arm%%:*}
      [ -n "${MSTAR_DECODE_ARMS:-}" ] && [[ " $MSTAR_DECODE_ARMS " != *" $name "* ]] && continue
      # shellcheck disable=SC2086 # the arm's flags are words
      timeout 120 "$bench" --model "$size" --rows "${MSTAR_DECODE_ROWS:-1,2,4,8,16,32,64,128}" --iters 50 \
        ${arm#*:} > "$d/bench_${size}_$name.log" 2>&1
      grep -E '^(device|RESULT)' "$d/bench_${size}_$name.log" | sed 's/^/  /'
      summarize "" "$d/bench_${size}_$name.log"
    done
    # The norms before the qkv and gate/up products done by small_gemv's blocks, and apart
    # (talker_cuda_limits::gemv_norm; the CUDA-core kernel's alone).
    for g in 1 0; do
      timeout 120 "$bench" --model "$size" --rows 1,2 --iters 50 --gemv-rows 8 --gemv-tensor-cores 0 \
        --gemv-norm "$g" > "$d/bench_${size}_gemv_norm$g.log" 2>&1
      summarize "" "$d/bench_${size}_gemv_norm$g.log"
    done
  done
}

# The prefill step's GPU time and the host time its call takes (see the list at the top), beside the decode step at
# the same row counts with the library's defaults.
stage_prefill() {
  local d="$out/prefill" size
  mkdir -p "$d"
  build_gpu "prefill" "$d" examples/qwen3_tts/talker/qwen3tts_talker_bench || return
  for size in ${MSTAR_PREFILL_SIZES:-0.6b}; do
    # Greedy, then sampled as the reference's generation config does (top-k 50, temperature 0.9; the service's
    # workload): the steps' difference is the sampling kernels' time. Each with the Talker's kernels launched
    # ordinarily and with programmatic dependent launch (MSTAR_PREFILL_PDL, --pdl).
    for pdl in ${MSTAR_PREFILL_PDL:-0 1}; do
      for mode in greedy sample; do
        talker_bench "$d/bench_${size}_${mode}_pdl$pdl.log" --model "$size" --rows "${MSTAR_PREFILL_ROWS:-1,16,64}" \
          --iters 20 --prefill-tokens "${MSTAR_PREFILL_TOKENS:-40}" --pdl "$pdl" $([ "$mode" = sample ] && echo --sample)
        grep -E '^(device|RESULT)' "$d/bench_${size}_${mode}_pdl$pdl.log" | sed 's/^/  /'
        summarize "$mode " "$d/bench_${size}_${mode}_pdl$pdl.log"
      done
    done
  done
}

# The codec's batching across time and the lane, end to end (see the list at the top).
stage_codecwait() {
  local d="$out/codecwait" ck=$compare_dir/ckpt06 arm i=0
  mkdir -p "$d"
  find_qwen3tts codecwait "$d" || return
  ensure_checkpoint codecwait "$d" 0.6b "$ck" || return
  local spec=${MSTAR_CODECWAIT_ARMS:-"--lane on|--lane on --codec-min-batch 8|--lane auto|--lane auto --codec-min-batch 8|--lane on --codec-batching all --codec-min-batch 8|--lane on"}
  local arms=()
  IFS='|' read -r -a arms <<< "$spec"
  for arm in "${arms[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # an arm is flags
    timeout 150 "$q" loadgen --model "$ck" --device cuda --language english --voice ryan --text "$compare_text" \
      --warmup 1 -c "${MSTAR_CODECWAIT_C:-1,16,64}" $arm > "$d/arm$i.log" 2>&1
    echo "codecwait arm $i ($arm):"
    grep -E '^\| mstar' "$d/arm$i.log"
    summary+=("codecwait arm $i ($arm): $(grep -E '^\| mstar' "$d/arm$i.log" | awk -F'|' '{printf "c=%s %s; ", $4, $8}' |
      tr -s ' ')")
  done
}

# Where the time goes under load (see the list at the top); the checkpoint is the compare stage's.
stage_diagnose() {
  local d="$out/diagnose" b=build-talker-gpu ck=$compare_dir/ckpt06 math
  mkdir -p "$d"
  find_qwen3tts diagnose "$d" || return
  "$q" loadgen --help > /dev/null 2>&1 ||
    { summary+=("diagnose: $q has no loadgen (built without cpp-httplib? carry build-carry, see the top)"); return; }
  [ "${MSTAR_DIAGNOSE_BESIDE:-1}" = 1 ] && build_gpu diagnose "$d" examples/qwen3_tts/pipeline/qwen3tts_beside_bench &&
  for math in auto fp16; do
    timeout 120 "$b/examples/qwen3_tts/pipeline/qwen3tts_beside_bench" --iters 20 --codec-math "$math" 2>&1 |
      tee "$d/beside_$math.log"
    summarize "beside $math: " "$d/beside_$math.log"
  done
  ensure_checkpoint diagnose "$d" 0.6b "$ck" || return
  local common=(--voice ryan --text "$compare_text") arm c lane extra
  for arm in ${MSTAR_DIAGNOSE_ARMS:-"1,on" "16,on" "64,on" "64,off" "64,on,tf32"}; do
    arm=${arm//,/ }
    read -r c lane extra <<< "$arm"
    local name="c${c}_${lane}${extra:+_$extra}" more=()
    [ -n "$extra" ] && more=(--codec-math "$extra")
    timeout 120 "$q" loadgen --model "$ck" --device cuda --language english "${common[@]}" -c "$c" --lane "$lane" \
      -n $((c < 16 ? 16 : ${MSTAR_DIAGNOSE_WAVES:-2} * c)) --warmup 1 "${more[@]}" --trace "$d/$name.trace.json" > "$d/$name.log" 2>&1
    tail -1 "$d/$name.log"
    python3 bench/reference/trace_summary.py "$d/$name.trace.json" > "$d/$name.summary.md" 2>&1
    summary+=("diagnose $name: $(tail -1 "$d/$name.log" | tr -s ' ')")
    gzip -f "$d/$name.trace.json"
  done
  start_server "$q" "$d/serve" --model "$ck" --lane on --max-live 64 --max-batch 64
  if [ -n "$url" ]; then
    timeout 150 "$q" loadgen-http --url "$url" "${common[@]}" -c 16,64 --warmup 1 > "$d/http.log" 2>&1
    tail -3 "$d/http.log"
    summary+=("diagnose http: $(grep -c '' "$d/http.log") lines, $(grep -E '^\| mstar-http' "$d/http.log" |
      awk -F'|' '{printf "c=%s ok %s failed %s; ", $4, $6, $7}')")
    curl -s "$url/metrics" > "$d/metrics.txt" 2>/dev/null
  else
    tail -5 "$d/serve.err"; summary+=("diagnose http: the server did not start (diagnose/serve.err)")
  fi
  kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null
}

# The tests of build-carry/build.tar.xz (see the list at the top): unpacked at the build directory's own path, the
# source tree's path linked to this tree (the tests name both), every test of the suites run.
# $1: the stage's name, for its log folder and summary lines (default carried; stage suite passes its own).
stage_carried() {
  local name=${1:-carried} d b rc
  d="$out/$name"
  mkdir -p "$d"
  adopt_carried_build "$name"
  rc=$?
  if [ "$rc" -eq 1 ]; then
    summary+=("$name: no carried build (build-carry/build.tar.xz, from scripts/carry_build.sh), or a build made here")
    return
  fi
  [ "$rc" -eq 0 ] || return
  b=$(readlink -f build-talker-gpu)
  echo "$name: the carried build of $(cat build-carry/COMMIT 2>/dev/null) at $b"
  python3 scripts/run_built_tests.py "$b" "$d/tests" --suites "${MSTAR_CARRIED_SUITES:-gpu,host,parity}" \
    --jobs "$(nproc)" | tee "$d/tests.txt"
  grep -hE '^\[doctest\] test cases' "$d"/tests/*gpu_test*.log 2>/dev/null | sed 's/^/  /'
  local gpu_cases
  gpu_cases=$(grep -hE '^\[doctest\] test cases' "$d"/tests/*gpu_test*.log 2>/dev/null | awk -F'|' '{
    for (i = 1; i <= NF; ++i) {
      n = $i + 0
      if ($i ~ /passed/) p += n; else if ($i ~ /failed/) f += n; else if ($i ~ /skipped/) s += n
    }
  } END { printf "%d passed, %d failed, %d skipped", p, f, s }')
  summary+=("$name: $(tail -n1 "$d/tests.txt") (the GPU programs' cases: $gpu_cases)")
  if command -v compute-sanitizer > /dev/null && [ -x "$b/tests/gpu/mstar_talker_gpu_tests" ]; then
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$b/tests/gpu/mstar_talker_gpu_tests" --no-intro \
      --test-case='small_gemv*,*norms done by the products*,*norms after*' > "$d/memcheck_talker.log" 2>&1
    rc=$?
    tail -3 "$d/memcheck_talker.log"
    summary+=("$name: talker gemv and norm tests under memcheck rc $rc")
  fi
}

# Branches against main (see the list at the top): each carried branch's talker GPU tests, then the decode step of
# main's carried bench and each branch's in turn, round after round, and the ratios.
stage_branches() {
  local d="$out/branches" bins=/tmp/mstar-branches t0 rc arm name tgz src round log bench label i extra
  t0=$(date +%s)
  mkdir -p "$d" "$bins"
  adopt_carried_build branches
  rc=$?
  if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 1 ] && summary+=("branches: main's carried build (scripts/carry_build.sh) is the baseline: none here")
    return
  fi
  # Seconds left of the stage's budget (MSTAR_BRANCHES_S): work that would not fit is left out, and said so.
  left() { echo $(("${MSTAR_BRANCHES_S:-540}" - ($(date +%s) - t0))); }
  local arms=()
  if [ -n "${MSTAR_BRANCHES:-}" ]; then
    IFS=';' read -ra arms <<< "$MSTAR_BRANCHES"
  else
    for tgz in build-carry/branch-*.tar.xz; do
      [ -f "$tgz" ] || continue
      name=${tgz#build-carry/branch-}
      arms+=("${name%.tar.xz}")
    done
  fi
  [ "${#arms[@]}" -gt 0 ] || { summary+=("branches: no build-carry/branch-*.tar.xz (scripts/carry_branch.sh)"); return; }
  # Each branch unpacked once and its source path linked to this tree (its tests read their fixtures there).
  local ready=() labels=(main) names=()
  local -A unpacked=()
  for arm in "${arms[@]}"; do
    name=${arm%%:*}
    if [ -z "${unpacked[$name]:-}" ]; then
      tgz=build-carry/branch-$name.tar.xz
      [ -f "$tgz" ] || { summary+=("branches $name: no $tgz"); continue; }
      rm -rf "${bins:?}/$name"
      tar -C "$bins" -xJf "$tgz" && [ -f "$bins/$name/SOURCE" ] ||
        { summary+=("branches $name: $tgz does not unpack to $name/ (scripts/carry_branch.sh packs it so)"); continue; }
      src=$(cat "$bins/$name/SOURCE")
      if [ ! -e "$src" ]; then
        mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"
      elif [ ! "$src" -ef "$root" ]; then
        summary+=("branches $name: $src (its source tree) is another folder here; its tests would read it")
        continue
      fi
      unpacked[$name]=1
      names+=("$name")
    fi
    ready+=("$arm")
    label=$name
    [[ "$arm" == *:* ]] && label="$label$(echo "${arm#*:}" | tr -c 'A-Za-z0-9\n' '_')"
    labels+=("$label")
  done
  # The decode step first: main's, then each branch's, round after round.
  local base=build-talker-gpu/examples/qwen3_tts/talker/qwen3tts_talker_bench
  local bench_args=${MSTAR_BRANCHES_BENCH:---model 0.6b --rows 1,2,4,8,16,32 --iters 30}
  round=0
  while [ "$round" -lt "${MSTAR_BRANCHES_ROUNDS:-2}" ]; do
    round=$((round + 1))
    i=0
    for arm in main "${ready[@]}"; do
      name=${arm%%:*}
      bench=$base
      [ "$name" != main ] && bench=$bins/$name/qwen3tts_talker_bench
      extra=""
      [[ "$arm" == *:* ]] && extra=${arm#*:}
      log="$d/step.${labels[$i]}.$round.log"
      i=$((i + 1))
      if [ "$(left)" -lt 60 ]; then
        summary+=("branches: ${labels[$((i - 1))]} round $round left out (MSTAR_BRANCHES_S)")
        continue
      fi
      # shellcheck disable=SC2086 # the arguments are words
      timeout 120 "$bench" $bench_args $extra > "$log" 2>&1
      echo "branches: $name $extra round $round rc $?"
    done
  done
  python3 - "$d" "${labels[@]}" << 'PY' | tee "$d/table.txt"
import glob, re, sys
d, names = sys.argv[1], sys.argv[2:]
steps = {}  # (name, round) -> {rows: ms}
for n in names:
    for path in sorted(glob.glob(f"{d}/step.{n}.*.log")):
        rnd = int(path.rsplit(".", 2)[1])
        for line in open(path):
            m = re.match(r"RESULT\s+\S+\s+fused\b.*?\brows\s+(\d+)\s+step\s+([0-9.]+)", line)
            if m:
                steps.setdefault((n, rnd), {})[int(m.group(1))] = float(m.group(2))
rounds = sorted({r for (_, r) in steps})
rows = sorted({k for v in steps.values() for k in v})
print("decode step, ms a step (rounds " + ", ".join(map(str, rounds)) + "), and each branch over main")
print("| rows | " + " | ".join(names) + " | " + " | ".join(f"{n} / main" for n in names[1:]) + " |")
print("| ---: " * (2 * len(names)) + "|")
for r in rows:
    ms = [" / ".join(f"{steps.get((n, k), {}).get(r, float('nan')):.3f}" for k in rounds) for n in names]
    ratio = []
    for n in names[1:]:
        q = [steps[(n, k)][r] / steps[("main", k)][r] for k in rounds
             if r in steps.get((n, k), {}) and r in steps.get(("main", k), {})]
        ratio.append(" / ".join(f"{x:.3f}" for x in q) if q else "-")
    print(f"| {r} | " + " | ".join(ms) + " | " + " | ".join(ratio) + " |")
PY
  summary+=("branches: table in branches/table.txt ($(grep -c '^| [0-9]' "$d/table.txt") row counts)")
  # Then each branch's talker GPU tests, and memcheck of the cases MSTAR_BRANCHES_MEMCHECK names.
  for name in "${names[@]}"; do
    if [ "$(left)" -lt 100 ]; then
      summary+=("branches $name: tests left out (MSTAR_BRANCHES_S)")
      continue
    fi
    timeout 150 "$bins/$name/mstar_talker_gpu_tests" --no-intro > "$d/$name.tests.log" 2>&1
    rc=$?
    summary+=("branches $name ($(cat "$bins/$name/COMMIT")): talker GPU tests rc $rc, $(grep -E '^\[doctest\] test cases' \
      "$d/$name.tests.log" | sed 's/^\[doctest\] //')")
    grep -E 'ERROR|FAILED' "$d/$name.tests.log" | head -5
    if [ -n "${MSTAR_BRANCHES_MEMCHECK:-}" ] && command -v compute-sanitizer > /dev/null; then
      if [ "$(left)" -lt 100 ]; then
        summary+=("branches $name: memcheck left out (MSTAR_BRANCHES_S)")
        continue
      fi
      timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$bins/$name/mstar_talker_gpu_tests" --no-intro \
        --test-case="$MSTAR_BRANCHES_MEMCHECK" > "$d/$name.memcheck.log" 2>&1
      rc=$?
      summary+=("branches $name: memcheck of '$MSTAR_BRANCHES_MEMCHECK' rc $rc, $(tail -1 "$d/$name.memcheck.log")")
    fi
  done
}

# Builds against each other (see the list at the top): each binary of MSTAR_AB_BINS in turn, MSTAR_AB_ROUNDS rounds.
stage_ab() {
  local d="$out/ab" ck=$compare_dir/ckpt06 bin round=0 args name
  mkdir -p "$d"
  [ -n "${MSTAR_AB_BINS:-}" ] || { summary+=("ab: MSTAR_AB_BINS names no binary"); return; }
  LD_LIBRARY_PATH=$(carried_library_path)
  export LD_LIBRARY_PATH
  args=${MSTAR_AB_ARGS:-}
  if [[ " $args " == *" CKPT "* ]]; then
    ensure_checkpoint ab "$d" 0.6b "$ck" || return
    args=${args//CKPT/$ck}
  fi
  while [ "$round" -lt "${MSTAR_AB_ROUNDS:-2}" ]; do
    round=$((round + 1))
    for bin in $MSTAR_AB_BINS; do
      name=$(basename "$bin")
      # shellcheck disable=SC2086 # the arguments are words
      timeout 200 "$bin" $args > "$d/$name.$round.log" 2>&1
      echo "ab $name, round $round (rc $?):"
      grep -E '^(RESULT|\| mstar)' "$d/$name.$round.log" | sed 's/^/  /'
      summary+=("ab $name round $round: $(grep -cE '^(RESULT|\| mstar)' "$d/$name.$round.log") result lines")
    done
  done
}

for s in "$@"; do
  case "$s" in
    wheels | reference | talker | speech | suite | codec | split | compare | peers | gputests | profile | codec_profile | attention | flashinfer | attention_profile | diagnose | codecwait | \
      decode | prefill | large | persistent | ab | branches | carried)
      "stage_$s" ;;
    *) echo "gpu_session.sh: unknown stage $s (see the list at the top)" >&2
       exit 2 ;;
  esac
  if [ "$s" != wheels ] && [ -d "$out/$s" ]; then
    tar -C "$out" -czf "$out/$s.tgz" "$s" && rm -rf "${out:?}/$s"
  fi
done
echo
# The card, since a call naming one kind may be given another (the figures of two cards are not compared).
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "== gpu_session.sh on ${card:-no GPU}"
for line in "${summary[@]}"; do echo "  $line"; done
