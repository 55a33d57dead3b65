#!/usr/bin/env bash
# Fetches a header-only CUDA library's headers out of its PyPI wheel (pip download, no install) into
# third_party/NAME/include (ignored by git), for scripts/cutlass.sh and scripts/flashinfer.sh:
#
#   bash scripts/wheel_headers.sh NAME PACKAGE VERSION PREFIX CHECK
#
#   NAME     the folder under third_party/ (third_party/NAME/include, third_party/NAME/VERSION)
#   PACKAGE  the PyPI package, VERSION its pinned version
#   PREFIX   the wheel's folder that holds the headers (its contents become include/)
#   CHECK    a header under PREFIX that must be there (e.g. cutlass/cutlass.h)
#   MSTAR_SETUP_DRY_RUN=1 ...   # say what would be fetched, fetch nothing
#
# When the pinned version is there already it touches neither pip nor the network, so an offline machine with
# third_party/NAME copied over passes.
set -euo pipefail
name=${1:?usage: wheel_headers.sh NAME PACKAGE VERSION PREFIX CHECK}
package=${2:?} version=${3:?} prefix=${4:?} check=${5:?}
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/third_party/$name
if [ -f "$dest/include/$check" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
if [ "${MSTAR_SETUP_DRY_RUN:-0}" = 1 ]; then
  echo "$name: would fetch (pip download): $package==$version, its headers into third_party/$name/include"
  exit 0
fi
echo "$name: fetching the headers of $package==$version (pip download)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download -q --disable-pip-version-check --no-deps "$package==$version" -d "$tmp"; then
  echo "$name: pip could not download $package==$version (no network?). Copy third_party/$name from a" \
       "machine that has it, or point meson at an include folder (-D${name}_include=DIR)" >&2
  exit 1
fi
# Only the headers: python's zipfile, as unzip may be missing where python3 is not.
python3 - "$tmp" "$prefix" "$check" <<'PY'
import glob, os, sys, zipfile
tmp, prefix, check = sys.argv[1], sys.argv[2].rstrip("/") + "/", sys.argv[3]
(wheel,) = glob.glob(os.path.join(tmp, "*.whl"))
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    if prefix + check not in names:
        sys.exit(f"{os.path.basename(wheel)} has no {prefix}{check}")
    for n in names:
        target = os.path.join(tmp, "include", n[len(prefix):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(n) as src, open(target, "wb") as out:
            out.write(src.read())
PY
rm -rf "$dest/include"
mkdir -p "$dest"
mv "$tmp/include" "$dest/include"
echo "$version" >"$dest/VERSION"
echo "$name: $package $version headers in third_party/$name/include ($(du -sh "$dest/include" | cut -f1))"
