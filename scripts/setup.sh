#!/usr/bin/env bash
# Makes sure what mstar's build and tests need is there, and installs only what is missing.
# It checks tools on PATH and headers/libraries the compiler and pkg-config find, never package
# names, so tools installed another way (pip's ninja, cmake and meson; a hand-built CUDA) count.
# Missing pieces are installed with apt under the names of the distribution at hand (Debian 12,
# Ubuntu 22.04, Ubuntu 24.04), and a current meson from pip. When everything is there it touches
# neither apt nor the network, so an offline machine with the pieces preinstalled passes.
# Both README commands call it.
#
#   bash scripts/setup.sh            # the build and the tests
#   bash scripts/setup.sh --fuzz     # also clang++ and its libFuzzer runtime (the fuzz suite);
#                                    # MSTAR_FUZZ=1 does the same
#   MSTAR_SETUP_DRY_RUN=1 ...        # say what would be installed, install nothing
#   MSTAR_CUTLASS=0 ...              # leave CUTLASS alone (below)
#
# The CUDA toolkit is not installed here: when nvcc is on PATH (or in /usr/local/cuda) the CUDA
# sources are built too, otherwise the build is host-only. With nvcc, scripts/cutlass.sh also fetches
# the CUTLASS headers (the CUDA codec's optional tf32-conv math) into third_party/cutlass where they
# are not there yet; that one is optional: where it cannot (no network) setup says so and goes on.
set -euo pipefail

fuzz=${MSTAR_FUZZ:-0}
for arg in "$@"; do
  case "$arg" in
    --fuzz) fuzz=1 ;;
    *) echo "setup: unknown argument $arg (known: --fuzz)" >&2; exit 2 ;;
  esac
done
dry_run=${MSTAR_SETUP_DRY_RUN:-0}
min_meson=1.4.0
cxx=${CXX:-c++}
command -v "$cxx" >/dev/null 2>&1 || cxx=g++

# The distribution, for package names (MSTAR_OS_RELEASE: another os-release file, for the tests).
os_release=${MSTAR_OS_RELEASE:-/etc/os-release}
distro=unknown
if [ -r "$os_release" ]; then
  distro=$(. "$os_release" && echo "${ID:-unknown}-${VERSION_ID:-}")
fi
case "$distro" in
  debian-12 | ubuntu-22.04 | ubuntu-24.04) known_distro=1 ;;
  *) known_distro=0 ;;
esac
# Package names that differ from Debian 12's (Ubuntu 24.04 ships pkg-config as pkgconf).
pkg_name() {
  case "$distro:$1" in
    ubuntu-24.04:pkg-config) echo pkgconf ;;
    *) echo "$1" ;;
  esac
}

have_tool() { command -v "$1" >/dev/null 2>&1; }
have_header() { printf '#include <%s>\n' "$1" | "$cxx" -std=c++20 -E -x c++ - >/dev/null 2>&1; }
have_pc() { have_tool pkg-config && pkg-config --exists "$1"; }

missing=()  # "what (package)"
packages=()
need() { # need WHAT PACKAGE: records a missing piece
  missing+=("$1 ($2)")
  packages+=("$(pkg_name "$2")")
}
check_all() {
  missing=()
  packages=()
  have_tool "$cxx" || need "a C++20 compiler ($cxx)" g++
  have_tool python3 || need "python3" python3
  have_tool pkg-config || need "pkg-config" pkg-config
  have_tool ninja || need "ninja" ninja-build
  have_tool cmake || need "cmake (the CMake consumer test)" cmake
  if have_tool "$cxx"; then
    have_header doctest/doctest.h || need "<doctest/doctest.h>" doctest-dev
    have_header CLI/CLI.hpp || need "<CLI/CLI.hpp> (mstar-validate)" libcli11-dev
    have_header nlohmann/json.hpp || need "<nlohmann/json.hpp> (the real model's checkpoint)" nlohmann-json3-dev
  fi
  if have_tool pkg-config; then
    have_pc yaml-cpp || need "yaml-cpp (pkg-config)" libyaml-cpp-dev
    have_pc fmt || need "fmt (pkg-config)" libfmt-dev
    have_pc benchmark || need "google benchmark (pkg-config; the benchmarks)" libbenchmark-dev
    have_pc libutf8proc || need "utf8proc (pkg-config; the real model's text tokenizer)" libutf8proc-dev
    have_pc cpp-httplib || have_header httplib.h || need "cpp-httplib (qwen3tts serve)" libcpp-httplib-dev
  fi
  if [ "$fuzz" = 1 ]; then
    if ! have_tool clang++; then
      need "clang++ (the fuzzer)" clang
    elif ! links_fuzzer; then
      need "clang's libFuzzer runtime" "$(fuzzer_runtime_package)"
    fi
  fi
}
links_fuzzer() {
  local dir; dir=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$dir/p.cpp"
  clang++ -fsanitize=fuzzer "$dir/p.cpp" -o "$dir/p" >/dev/null 2>&1
  local rc=$?
  rm -rf "$dir"
  return $rc
}
# Debian 12 and Ubuntu 24.04 put it in libclang-rt-N-dev; Ubuntu 22.04 (clang 14) in libclang-common-14-dev.
fuzzer_runtime_package() {
  local major; major=$(clang++ -dumpversion 2>/dev/null | cut -d. -f1)
  if apt-cache show "libclang-rt-$major-dev" >/dev/null 2>&1; then
    echo "libclang-rt-$major-dev"
  else
    echo "libclang-common-$major-dev"
  fi
}

check_all
if ((${#missing[@]})); then
  echo "setup: missing: ${missing[*]}"
  if [ "$dry_run" = 1 ]; then
    echo "setup: would install (apt, $distro): ${packages[*]}"
  elif [ "$known_distro" = 0 ] || ! have_tool apt-get; then
    echo "setup: $distro is not one this script installs on (Debian 12, Ubuntu 22.04, 24.04); install the" \
         "pieces above (Debian names in parentheses) and run it again" >&2
    exit 1
  else
    echo "setup: installing (apt, $distro): ${packages[*]}"
    sudo_=""
    if [ "$(id -u)" != 0 ]; then
      have_tool sudo || { echo "setup: not root and no sudo: install ${packages[*]} as root" >&2; exit 1; }
      sudo_="sudo"
    fi
    if ! { $sudo_ apt-get update -qq &&
           DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${packages[@]}" \
             >/dev/null; }; then
      echo "setup: apt could not install ${packages[*]} (no network, or no such package here). Without" \
           "network: install them from a local mirror or .deb files, or put the tools on PATH another way" \
           "(pip install ninja cmake meson), then run this again; README.md, \"Without network\"." >&2
      exit 1
    fi
    check_all
    if ((${#missing[@]})); then
      echo "setup: still missing after apt: ${missing[*]}" >&2
      exit 1
    fi
  fi
fi

meson_ok() {
  # Without the packaging module: compare the dotted numbers by hand.
  have_tool meson || return 1
  local have; have=$(meson --version)
  [ "$(printf '%s\n%s\n' "$min_meson" "$have" | sort -V | head -n1)" = "$min_meson" ]
}
if ! meson_ok; then
  echo "setup: meson >= $min_meson is not on PATH (Debian's 1.0.1 tracks no CUDA header dependencies)"
  if [ "$dry_run" = 1 ]; then
    echo "setup: would install (pip): meson>=$min_meson"
  else
    echo "setup: installing meson >= $min_meson from pip"
    python3 -m pip install -q --disable-pip-version-check "meson>=$min_meson" ||
      python3 -m pip install -q --disable-pip-version-check --break-system-packages "meson>=$min_meson" ||
      { echo "setup: pip could not install meson (no network?): pip install a meson wheel by hand" >&2; exit 1; }
    command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
    meson_ok || { echo "setup: meson >= $min_meson is still not on PATH; add pip's script directory to PATH" >&2; exit 1; }
  fi
fi

if ! have_tool nvcc && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: nvcc is in /usr/local/cuda/bin but not on PATH; the scripts add it"
fi
if [ "${MSTAR_CUTLASS:-1}" != 0 ] && { have_tool nvcc || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  MSTAR_SETUP_DRY_RUN=$dry_run bash "$(dirname "$0")/cutlass.sh" ||
    echo "setup: going on without CUTLASS: the build leaves the CUDA codec's tf32-conv math out" >&2
fi
