// Writes mono audio as a RIFF/WAVE file: 16-bit PCM (what players expect) or 32-bit IEEE float (the
// decoder's samples bit for bit). Samples are in [-1, 1]; PCM rounds x * 32767 to nearest.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace qwen3_tts {

enum class wav_format { pcm16, float32 };

// The whole file's bytes (header and data, little-endian).
std::vector<std::uint8_t> encode_wav(std::span<const float> samples, int sample_rate, wav_format format);

// Throws naming the path when the file cannot be written.
void write_wav(const std::string& path, std::span<const float> samples, int sample_rate, wav_format format);

} // namespace qwen3_tts
