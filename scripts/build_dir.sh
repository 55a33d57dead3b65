# shellcheck shell=bash
# Sourced by scripts/carry_build.sh and scripts/carry_branch.sh: the checks and facts of a meson build directory
# both need before packing it. Each check prints "<caller>: <what is wrong and what to run>" and exits.

# That $2 is a meson build directory whose targets ($3..., or all) are built and up to date; $1 names the caller.
# (grep -c reads ninja's whole list: grep -q would stop at the first line, and pipefail would take ninja's SIGPIPE
# for a failure, so that an out-of-date build passed.)
require_built() {
  local who=$1 b=$2 t
  shift 2
  [ -f "$b/meson-info/meson-info.json" ] && [ -f "$b/meson-info/intro-tests.json" ] ||
    { echo "$who: $b is not a meson build directory (no meson-info/)" >&2; exit 1; }
  for t in "$@"; do
    [ -x "$b/$t" ] || { echo "$who: $b has no $t: run ninja -C $b $*" >&2; exit 1; }
  done
  if [ "$(ninja -C "$b" -n "$@" 2>/dev/null | grep -c '^\[')" != 0 ]; then
    echo "$who: $b is not up to date with its sources: run ninja -C $b $*" >&2
    exit 1
  fi
}

# The source tree of build directory $1, as meson recorded it.
build_source() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["directories"]["source"])' \
    "$1/meson-info/meson-info.json"
}

# The short commit of source tree $1, "+dirty" where its tracked files differ from it (build-carry/ and third_party/
# are no part of it).
tree_commit() {
  echo "$(git -C "$1" rev-parse --short HEAD)$(git -C "$1" diff --quiet HEAD -- . ':!build-carry' ':!third_party' ||
    echo +dirty)"
}
