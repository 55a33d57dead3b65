#include "sm_partition.hpp"

#include <cuda.h>

#include <stdexcept>
#include <string>

namespace qwen3_tts {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("qwen3_tts SM partition: " + what); }

// The driver function `name` at this header's ABI (CUDA_VERSION), through the runtime.
template <class F>
F driver_function(const char* name) {
  void* fn = nullptr;
#if CUDART_VERSION >= 12050 // cudaGetDriverEntryPointByVersion; green contexts came with 12.4
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, CUDA_VERSION, cudaEnableDefault, &found);
#else
  const cudaError_t e = cudaErrorNotSupported;
  const cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#endif
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr)
    fail(std::string("the CUDA driver has no ") + name +
         " (green contexts need a driver of CUDA 12.4 or later); leave the SM count at 0 (the whole GPU)");
  return reinterpret_cast<F>(fn);
}

void check(CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) fail(std::string(call) + " failed: CUresult " + std::to_string(int(r)));
}

struct driver {
  decltype(&cuDeviceGet) device_get = driver_function<decltype(&cuDeviceGet)>("cuDeviceGet");
  decltype(&cuDeviceGetDevResource) get_resource =
      driver_function<decltype(&cuDeviceGetDevResource)>("cuDeviceGetDevResource");
  decltype(&cuDevSmResourceSplitByCount) split =
      driver_function<decltype(&cuDevSmResourceSplitByCount)>("cuDevSmResourceSplitByCount");
  decltype(&cuDevResourceGenerateDesc) describe =
      driver_function<decltype(&cuDevResourceGenerateDesc)>("cuDevResourceGenerateDesc");
  decltype(&cuGreenCtxCreate) create = driver_function<decltype(&cuGreenCtxCreate)>("cuGreenCtxCreate");
  decltype(&cuGreenCtxDestroy) destroy = driver_function<decltype(&cuGreenCtxDestroy)>("cuGreenCtxDestroy");
  decltype(&cuGreenCtxStreamCreate) stream_create =
      driver_function<decltype(&cuGreenCtxStreamCreate)>("cuGreenCtxStreamCreate");
  decltype(&cuStreamDestroy) stream_destroy = driver_function<decltype(&cuStreamDestroy)>("cuStreamDestroy");
};

const driver& drv() {
  static const driver d;
  return d;
}

} // namespace

sm_partition_stream::sm_partition_stream(int sm_count) {
  int ordinal = 0;
  if (cudaGetDevice(&ordinal) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) // the primary context, first
    fail("no usable CUDA device");
  const driver& d = drv();
  CUdevice dev{};
  check(d.device_get(&dev, ordinal), "cuDeviceGet");
  CUdevResource all{};
  check(d.get_resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource");
  const int total = int(all.sm.smCount);
  if (sm_count < 1 || sm_count > total)
    throw std::invalid_argument("qwen3_tts SM partition: " + std::to_string(sm_count) + " SMs asked; the device has " +
                                std::to_string(total) + " (give 1.." + std::to_string(total) +
                                ", or 0 where 0 means the whole GPU)");
  CUdevResource group{}, rest{};
  unsigned groups = 1;
  check(d.split(&group, &groups, &all, &rest, 0, unsigned(sm_count)), "cuDevSmResourceSplitByCount");
  if (groups != 1) fail("cuDevSmResourceSplitByCount made no group of " + std::to_string(sm_count) + " SMs");
  CUdevResourceDesc desc{};
  check(d.describe(&desc, &group, 1), "cuDevResourceGenerateDesc");
  CUgreenCtx ctx = nullptr;
  check(d.create(&ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate");
  CUstream s = nullptr;
  const CUresult made = d.stream_create(&s, ctx, CU_STREAM_NON_BLOCKING, 0);
  if (made != CUDA_SUCCESS) {
    d.destroy(ctx);
    check(made, "cuGreenCtxStreamCreate");
  }
  ctx_ = ctx;
  stream_ = s;
  sms_ = int(group.sm.smCount);
}

sm_partition_stream::~sm_partition_stream() {
  const driver& d = drv();
  if (stream_) d.stream_destroy(stream_);
  if (ctx_) d.destroy(static_cast<CUgreenCtx>(ctx_));
}

} // namespace qwen3_tts
