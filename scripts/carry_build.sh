#!/usr/bin/env bash
# Packs a CUDA build directory made on the build machine for the GPU machine, so that a device call runs its
# programs and tests without building there (a full CUDA build takes minutes of a call's 10):
#
#   build-carry/build.tar.xz   the build directory's executables (stripped) and meson-info/ (its list of tests)
#   build-carry/lib/           the shared libraries they load but glibc's, libstdc++'s, the sanitizers' and CUDA's
#                              (yaml-cpp, fmt, cpp-httplib and what it loads); the GPU machine has none of them
#   build-carry/BUILD          the build directory's and the source tree's absolute paths: the tests name both,
#                              so the GPU machine unpacks the build at the same path and links the source path to
#                              its copy of the tree
#   build-carry/COMMIT         the commit the build is of ("+dirty" when the tree had uncommitted changes)
#
#   meson setup /tmp/mstar-gpu -Dgpu=enabled --buildtype=release && ninja -C /tmp/mstar-gpu
#   bash scripts/carry_build.sh /tmp/mstar-gpu
#   then, on the GPU machine: bash bench/gpu_session.sh carried      (carry build-carry)
#
# Other files of build-carry/ but lib/ (binaries of another commit carried for an A/B, say) are left alone. The
# device tool carries at most 64 MiB in all; the script says how much build-carry/ holds.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_dir.sh
b=${1:?"usage: bash scripts/carry_build.sh BUILD_DIR (a meson build directory, built)"}
b=$(cd "$b" && pwd)
[[ "$b" != *[[:space:]]* ]] ||
  { echo "carry_build.sh: $b: a path with spaces cannot be recorded in BUILD" >&2; exit 1; }
require_built carry_build.sh "$b"
src=$(build_source "$b")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# Everything but objects, static libraries, per-target folders and ninja's state; then the ELF files stripped.
tar -C "$b" -cf - --exclude='*.p' --exclude='*.o' --exclude='*.a' --exclude='.ninja_*' --exclude='meson-logs' . |
  tar -C "$stage" -xf -
mapfile -t elves < <(find "$stage" -type f -exec sh -c 'head -c4 "$1" | grep -q "ELF" && echo "$1"' _ {} \;)
[ "${#elves[@]}" -gt 0 ] || { echo "carry_build.sh: no executable in $b: build it first" >&2; exit 1; }
strip "${elves[@]}" 2>/dev/null || true
# lib/ is this build's alone: a library left from an earlier build could shadow the one the executables need.
rm -rf build-carry/lib && mkdir -p build-carry/lib
tar -C "$stage" -cJf build-carry/build.tar.xz .
# The libraries the executables load, less the system's C and C++ runtimes, the sanitizers' (the compiler's) and
# CUDA's: the GPU machine has those (CUDA's in its Python wheels, see bench/gpu_session.sh's carried_library_path).
ldd "${elves[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
  grep -vE '/(lib[alt]san|libubsan|libcu[A-Za-z]*|libnv[A-Za-z0-9_]*)\.so' |
  while read -r lib; do cp -L "$lib" build-carry/lib/; done
echo "$b $src" > build-carry/BUILD
tree_commit "$src" > build-carry/COMMIT
echo "build-carry/: ${#elves[@]} executables of $b ($(du -h build-carry/build.tar.xz | cut -f1) packed), $(ls \
build-carry/lib | wc -l) libraries, $(du -sh build-carry | cut -f1) in all; commit $(cat build-carry/COMMIT)"
