// RIFF/WAVE writer (see wav.hpp).
#include "wav.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace qwen3_tts {
namespace {

void put(std::vector<std::uint8_t>& out, std::uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(std::uint8_t(v >> (8 * i)));
}
void put(std::vector<std::uint8_t>& out, const char* tag) { out.insert(out.end(), tag, tag + 4); }

} // namespace

std::vector<std::uint8_t> encode_wav(std::span<const float> samples, int sample_rate, wav_format format) {
  const std::uint32_t width = format == wav_format::pcm16 ? 2 : 4;
  const std::uint64_t data_bytes = std::uint64_t(samples.size()) * width;
  if (data_bytes > 0xFFFFFFFFull - 44)
    throw std::invalid_argument("wav: " + std::to_string(samples.size()) +
                                " samples exceed what a RIFF file can hold (4 GiB); write shorter pieces");
  std::vector<std::uint8_t> out;
  out.reserve(44 + data_bytes);
  put(out, "RIFF");
  put(out, std::uint32_t(36 + data_bytes), 4);
  put(out, "WAVE");
  put(out, "fmt ");
  put(out, 16, 4);
  put(out, format == wav_format::pcm16 ? 1 : 3, 2); // 1: PCM, 3: IEEE float
  put(out, 1, 2);                                   // mono
  put(out, std::uint32_t(sample_rate), 4);
  put(out, std::uint32_t(sample_rate) * width, 4);  // bytes per second
  put(out, width, 2);                               // block align
  put(out, width * 8, 2);                           // bits per sample
  put(out, "data");
  put(out, std::uint32_t(data_bytes), 4);
  for (float s : samples) {
    if (format == wav_format::pcm16) {
      const float v = std::clamp(s, -1.0f, 1.0f) * 32767.0f;
      put(out, std::uint32_t(std::uint16_t(std::int16_t(std::lround(v)))), 2);
    } else {
      std::uint32_t bits;
      std::memcpy(&bits, &s, 4);
      put(out, bits, 4);
    }
  }
  return out;
}

void write_wav(const std::string& path, std::span<const float> samples, int sample_rate, wav_format format) {
  const auto bytes = encode_wav(samples, sample_rate, format);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size())) || !f.flush())
    throw std::runtime_error("wav: cannot write " + path + "; check that its folder exists and is writable");
}

} // namespace qwen3_tts
