#!/usr/bin/env bash
# Fetches FlashInfer's headers (the field's header-only CUDA library for paged attention, Apache 2.0, the version
# pinned below) into third_party/flashinfer/include (ignored by git). Only qwen3tts_attention_bench uses them: it
# times the Talker's decode attention against FlashInfer's batch decode over the same cache (docs/model.md,
# "Attention"). Optional and not fetched by setup.sh (the wheel is about 100 MB); meson builds the bench where
# the headers are found.
#
#   bash scripts/flashinfer.sh
#   MSTAR_SETUP_DRY_RUN=1 ...   # say what would be fetched, fetch nothing
#
# The headers come in the PyPI wheel flashinfer-python (flashinfer/data/include/ holds flashinfer/), through
# scripts/wheel_headers.sh. A copy elsewhere: meson -Dflashinfer_include=DIR.
set -euo pipefail
version=0.6.9 # the last release whose headers build with CUDA 13.0's CCCL (3.0; 0.6.10 on need cuda::fast_mod_div)
exec bash "$(dirname "$0")/wheel_headers.sh" flashinfer flashinfer-python "$version" flashinfer/data/include \
  flashinfer/attention/decode.cuh
