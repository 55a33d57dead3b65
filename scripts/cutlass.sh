#!/usr/bin/env bash
# Fetches the CUTLASS headers (NVIDIA's header-only CUDA template library, the version pinned below) into
# third_party/cutlass/include (ignored by git): the CUDA codec's implicit-GEMM convolutions
# (codec_cuda_math::cutlass_tf32, `--codec-math tf32-conv`) are compiled only where they are. Optional: a build
# without them leaves that math out and says so when it is asked for. setup.sh calls this where nvcc is found.
#
#   bash scripts/cutlass.sh
#   MSTAR_SETUP_DRY_RUN=1 ...   # say what would be fetched, fetch nothing
#
# The headers come in the PyPI wheel nvidia-cutlass (cutlass_library/source/include/ holds cutlass/ and cute/),
# through scripts/wheel_headers.sh. A copy elsewhere: meson -Dcutlass_include=DIR.
set -euo pipefail
version=4.2.0.0 # the wheel's version: CUTLASS 4.2.0
exec bash "$(dirname "$0")/wheel_headers.sh" cutlass nvidia-cutlass "$version" cutlass_library/source/include \
  cutlass/cutlass.h
