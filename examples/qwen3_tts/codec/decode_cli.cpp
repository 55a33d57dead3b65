// qwen3tts decode: codec frames (JSON, as --dump-codes writes them) to a 24 kHz mono WAV, decoded
// window by window with the streaming state, as the codec_chunk node decodes a request.
#include "decode_cli.hpp"

#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "codec_checkpoint.hpp"
#include "codes_json.hpp"
#include "wav.hpp"

namespace qwen3_tts {

int decode_main(int argc, char** argv) {
  CLI::App app{"qwen3tts decode: decode Qwen3-TTS 12 Hz codec frames to a WAV file (host, float32)", "qwen3tts decode"};
  std::string model, codes_path, out;
  std::vector<int> ramp{1, 2, 4, 8};
  bool as_float = false;
  app.add_option("--model", model, "checkpoint folder (holds speech_tokenizer/)")->required();
  app.add_option("--codes", codes_path, "JSON {\"frames\": [[16 codes], ...]}")->required();
  app.add_option("--out", out, "WAV file to write")->required();
  app.add_option("--window", ramp, "window widths in frames, the last repeating")->delimiter(',')->capture_default_str();
  app.add_flag("--float", as_float, "write 32-bit float samples instead of 16-bit PCM");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2; // CLI11's own codes (106 for a missing option, ...); --help is 0
  }
  try {
    const auto decoder = load_codec_decoder(model);
    const auto& cfg = decoder.config();
    const auto frames = read_codes_json(codes_path, cfg.num_quantizers, cfg.codebook_size);
    if (frames.empty())
      throw std::invalid_argument("no frames in " + codes_path +
                                  ": nothing to decode (a request that ended at its first step dumps none)");
    const auto t0 = std::chrono::steady_clock::now();
    const auto audio = decode_ramp(decoder, frames, ramp);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_wav(out, audio, cfg.output_sample_rate, as_float ? wav_format::float32 : wav_format::pcm16);
    std::printf("%zu frames -> %zu samples (%.2f s of audio at %d Hz) in %.2f s; wrote %s\n",
                frames.size() / std::size_t(cfg.num_quantizers), audio.size(),
                double(audio.size()) / cfg.output_sample_rate, cfg.output_sample_rate, secs, out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qwen3tts decode: %s\n", e.what());
    return 1;
  }
}

} // namespace qwen3_tts
