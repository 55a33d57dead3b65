// The consumer as a CUDA source: nvcc compiles mstar's headers (C++20 only) with nothing but the flags
// the package hands CUDA sources (CMake's mstar::mstar, pkg-config's cuda_cflags). run_consumers.py
// compiles it to an object when nvcc is found; no GPU is needed.
#include <mstar/backend/cuda.hpp>
#include <mstar/kernels/recurrent.cuh>
#include <mstar/mstar.hpp>

// clang-format off
using KvCache    = mstar::kv_cache<"kv_cache", mstar::blocks<4096>, mstar::block_tokens<16>>;
using Positions  = mstar::positions<"positions">;
using Attention  = mstar::attention<"attention", mstar::depends_on<"kv_cache", "positions">>;
using CodecState = mstar::recurrent_pool<"codec_state", mstar::bf16, mstar::shape<16, 1024>, 8, 257>;

using TalkerDecode = mstar::node<"talker_decode", mstar::declares<KvCache, Attention, Positions>, mstar::walk::chain>;
using CodecChunk   = mstar::node<"codec_chunk", mstar::declares<CodecState>>;
using Model        = mstar::model<"consumer_cuda", mstar::worker<"gpu0", mstar::group<"Talker", TalkerDecode>,
                                                   mstar::group<"Codec", mstar::side_stream, CodecChunk>>>;
// clang-format on

static_assert(Model::verdict.ok(), "the consumer's model must be valid under nvcc too");
static_assert(Model::is_side_node<CodecChunk>, "codec_chunk must take the side lane under nvcc too");

__global__ void consumer_kernel(float* x) { x[threadIdx.x] += 1.0f; }
