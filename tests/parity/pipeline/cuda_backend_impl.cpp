// This test program's one definition of the CUDA backend: in a build with nvcc, the synth command's library
// (qwen3tts_synth_cli) runs the real model on the CUDA backend too, and a program defines that backend once.
#include <mstar/backend/cuda_impl.hpp>
