#!/usr/bin/env bash
# Packs a branch's CUDA Talker programs for the GPU machine, so that one device call compares the branch with main
# (bench/gpu_session.sh branches) without building there:
#
#   build-carry/branch-NAME.tar.xz   NAME/qwen3tts_talker_bench and NAME/mstar_talker_gpu_tests (stripped), NAME/SOURCE
#                                    (the source tree the tests name: the GPU machine links it to its copy of the
#                                    tree, so a branch must not change the test fixtures) and NAME/COMMIT
#
#   git worktree add -b my/change /work/mine main && cd /work/mine && ln -s /work/main/third_party third_party
#   meson setup /tmp/mine-gpu -Dgpu=enabled --buildtype=release
#   ninja -C /tmp/mine-gpu examples/qwen3_tts/talker/qwen3tts_talker_bench tests/gpu/mstar_talker_gpu_tests
#   bash scripts/carry_branch.sh mine /tmp/mine-gpu        (from main's tree: build-carry/ is main's)
#
# then, with main's own build carried too (scripts/carry_build.sh), one call:
#   run(command="bash bench/gpu_session.sh branches", carry=["build-carry"])
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_dir.sh
name=${1:?"usage: bash scripts/carry_branch.sh NAME BUILD_DIR (a meson build directory of the branch, built)"}
b=${2:?"usage: bash scripts/carry_branch.sh NAME BUILD_DIR (a meson build directory of the branch, built)"}
[[ "$name" =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "carry_branch.sh: NAME '$name': letters, digits, _ . - only" >&2; exit 1; }
b=$(cd "$b" && pwd)
targets=(examples/qwen3_tts/talker/qwen3tts_talker_bench tests/gpu/mstar_talker_gpu_tests)
require_built carry_branch.sh "$b" "${targets[@]}"
src=$(build_source "$b")
[[ "$src" != *[[:space:]]* ]] || { echo "carry_branch.sh: $src: a path with spaces" >&2; exit 1; }
commit=$(tree_commit "$src")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name"
for t in "${targets[@]}"; do cp "$b/$t" "$stage/$name/"; done
strip "$stage/$name"/* 2>/dev/null || true
echo "$src" > "$stage/$name/SOURCE"
echo "$commit" > "$stage/$name/COMMIT"
mkdir -p build-carry
tar -C "$stage" -cJf "build-carry/branch-$name.tar.xz" "$name"
echo "build-carry/branch-$name.tar.xz: $commit of $src ($(du -h "build-carry/branch-$name.tar.xz" | cut -f1));" \
  "build-carry/ holds $(du -sh build-carry | cut -f1) (the device tool carries 64 MiB)"
