#!/usr/bin/env bash
# Installs what mstar's build and tests need: Debian packages and a current meson from pip.
# Idempotent, and costs about a second when everything is already there. Both README commands
# call it. The CUDA toolkit is not installed here: when nvcc is on PATH (or in /usr/local/cuda)
# the CUDA sources are built too, otherwise the build is host-only.
set -euo pipefail

debs=(pkg-config ninja-build cmake python3 g++ clang libclang-rt-14-dev
      libyaml-cpp-dev doctest-dev libfmt-dev libcli11-dev libbenchmark-dev nlohmann-json3-dev libutf8proc-dev libcpp-httplib-dev)
min_meson=1.4.0

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

meson_ok_plain() {
  # Without the packaging module: compare the dotted numbers by hand.
  command -v meson >/dev/null 2>&1 || return 1
  local have; have=$(meson --version)
  [ "$(printf '%s\n%s\n' "$min_meson" "$have" | sort -V | head -n1)" = "$min_meson" ]
}
if ! meson_ok_plain; then
  echo "setup: installing meson >= $min_meson from pip (Debian's 1.0.1 tracks no CUDA header dependencies)"
  python3 -m pip install -q --disable-pip-version-check "meson>=$min_meson" ||
    python3 -m pip install -q --disable-pip-version-check --break-system-packages "meson>=$min_meson"
  command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
fi
meson_ok_plain || { echo "setup: meson >= $min_meson is still not on PATH; add pip's script directory to PATH" >&2; exit 1; }

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: nvcc is in /usr/local/cuda/bin but not on PATH; the scripts add it"
fi
