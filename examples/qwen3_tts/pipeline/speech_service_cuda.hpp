// The CUDA runtime of speech_service: the CUDA Talker, its weights uploaded from the host Talker's (bf16
// checkpoints round-trip exactly through float32), and the CUDA codec (speech_forwards_cuda.hpp). A program
// built with CUDA registers it once, before its first service is built; speech_service then runs on it where
// its options' device asks for it and a CUDA device is present.
//
//   register_cuda_service<host_speech>();   // e.g. at static initialisation of a translation unit
#pragma once

#include <iostream>
#include <memory>
#include <stdexcept>

#include "speech_forwards_cuda.hpp"
#include "speech_service.hpp"

namespace qwen3_tts::pipeline {

template <class Spec>
std::unique_ptr<detail::service_runtime<Spec>> make_cuda_service_runtime(const talker_host& talker,
                                                                         const codec_decoder& codec,
                                                                         const speech_service_options& o,
                                                                         const mstar::engine_options& eo) {
  if (!cuda_device_present()) {
    if (o.device == "cuda")
      throw std::invalid_argument("qwen3_tts::speech_service: device cuda, but no CUDA device is usable here; use "
                                  "device host (or auto)");
    return nullptr;
  }
  const auto top_p_sampled = [](const sampling_settings& s) { return s.do_sample && s.top_p < 1.0f; };
  if (o.device == "auto" && (top_p_sampled(o.sampling.talker) || top_p_sampled(o.sampling.sub))) {
    std::cerr << "qwen3_tts::speech_service: the sampling has top_p < 1, which the CUDA Talker does not compute "
                 "yet: serving on the host\n";
    return nullptr;
  }
  const codec_cuda_math codec_math = codec_math_named(o.codec_math);
  talker_cuda_limits limits = speech_talker_limits<Spec>(o.max_batch);
  limits.pdl = o.talker_pdl;
  if (!o.talker_gemv_tensor_cores) {
    limits.gemv_tensor_cores = false;
    limits.gemv_rows = 1;
  }
  auto gpu = std::make_shared<talker_cuda>(cuda_dims(talker.config()), limits);
  gpu->load_weights(host_weight_source(talker.weights()));
  mstar::engine_options cuda_eo = eo;
  cuda_eo.max_tokens = std::uint32_t(cuda_prefill_tokens); // the CUDA Talker's prefill scratch
  talker_cuda& ref = *gpu;
  return std::make_unique<detail::service_runtime_on<Spec, mstar::cuda_backend>>(
      talker, codec, o, cuda_eo,
      [&](mstar::cuda_backend& b, const speech_forward_options& fo) {
        return std::make_unique<speech_forwards<Spec, mstar::cuda_backend>>(b, talker, ref, codec, o.sampling, fo,
                                                                            codec_math);
      },
      std::shared_ptr<void>(gpu));
}

template <class Spec>
void register_cuda_service() {
  cuda_service_runtime<Spec> = &make_cuda_service_runtime<Spec>;
}

} // namespace qwen3_tts::pipeline
