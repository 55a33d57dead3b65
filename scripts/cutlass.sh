#!/usr/bin/env bash
# Fetches the CUTLASS headers (NVIDIA's header-only CUDA template library, the version pinned below) into
# third_party/cutlass/include (ignored by git): the CUDA codec's implicit-GEMM convolutions
# (codec_cuda_math::cutlass_tf32, `--codec-math tf32-conv`) are compiled only where they are. Optional: a build
# without them leaves that math out and says so when it is asked for. setup.sh calls this where nvcc is found.
#
#   bash scripts/cutlass.sh
#   MSTAR_SETUP_DRY_RUN=1 ...   # say what would be fetched, fetch nothing
#
# The headers come in the PyPI wheel nvidia-cutlass (pip download, no install; cutlass_library/source/include/
# holds cutlass/ and cute/). When the pinned version is there already it touches neither pip nor the network, so
# an offline machine with third_party/cutlass copied over passes. A copy elsewhere: meson -Dcutlass_include=DIR.
set -euo pipefail

version=4.2.0.0 # the wheel's version: CUTLASS 4.2.0
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/third_party/cutlass
if [ -f "$dest/include/cutlass/cutlass.h" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
if [ "${MSTAR_SETUP_DRY_RUN:-0}" = 1 ]; then
  echo "cutlass: would fetch (pip download): nvidia-cutlass==$version, its headers into third_party/cutlass/include"
  exit 0
fi
echo "cutlass: fetching the CUTLASS $version headers (pip download nvidia-cutlass==$version)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download -q --disable-pip-version-check --no-deps "nvidia-cutlass==$version" -d "$tmp"; then
  echo "cutlass: pip could not download nvidia-cutlass==$version (no network?). Copy third_party/cutlass from a" \
       "machine that has it, or point meson at a CUTLASS include folder (-Dcutlass_include=DIR)" >&2
  exit 1
fi
# Only the headers: python's zipfile, as unzip may be missing where python3 is not.
python3 - "$tmp" <<'EOF'
import glob, os, sys, zipfile
tmp = sys.argv[1]
prefix = "cutlass_library/source/include/"
(wheel,) = glob.glob(os.path.join(tmp, "nvidia_cutlass-*.whl"))
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    if not any(n == prefix + "cutlass/cutlass.h" for n in names):
        sys.exit(f"cutlass: {os.path.basename(wheel)} has no {prefix}cutlass/cutlass.h")
    for n in names:
        target = os.path.join(tmp, "include", n[len(prefix):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(n) as src, open(target, "wb") as out:
            out.write(src.read())
EOF
rm -rf "$dest/include"
mkdir -p "$dest"
mv "$tmp/include" "$dest/include"
echo "$version" >"$dest/VERSION"
echo "cutlass: CUTLASS $version headers in third_party/cutlass/include ($(du -sh "$dest/include" | cut -f1))"
