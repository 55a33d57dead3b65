// The CUDA backend's definitions, compiled once by g++ against cuda_runtime.h: the one translation
// unit of mstar_example_gpu_tests that includes backend/cuda_impl.hpp.
#include <mstar/backend/cuda_impl.hpp>
