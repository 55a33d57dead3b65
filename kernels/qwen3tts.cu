// Recurrent-state launchers for the Qwen3-TTS-shaped model: its codec decoder holds one pool,
// codec_state, of bf16 (layer-major [layers][slots][state]); gather, scatter and zero_slots each run
// all of its layers in one launch. The host side names the element mstar::bf16 (CUDA-free), device
// code __nv_bfloat16: both are instantiated, the kernel behind them is the same byte copy.
#include <mstar/kernels/recurrent.cuh>

#include <cuda_bf16.h>

MSTAR_INSTANTIATE_RECURRENT(mstar::bf16);
MSTAR_INSTANTIATE_RECURRENT(__nv_bfloat16);
