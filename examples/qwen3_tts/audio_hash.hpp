// Per-request audio digests and the comparison of two runs: the example's byte-identity check.
// A digest is 64-bit FNV-1a over the request's samples as bytes, in order; feeding the audio chunk
// by chunk gives the digest of the whole (FNV-1a is a streaming hash), so a run can hash as chunks
// land. Samples are int16 little-endian (the byte order of every machine this runs on).
//
//   qwen3_tts::audio_digest d;
//   d.update(chunk);                          // each chunk of one request, in order
//   std::map<request_id, audio_digest> a, b;  // two runs
//   auto diff = qwen3_tts::compare_runs(a, b); // empty when every request matched
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace qwen3_tts {

struct audio_digest {
  static constexpr std::uint64_t offset_basis = 0xcbf29ce484222325ull;
  static constexpr std::uint64_t prime = 0x100000001b3ull;

  std::uint64_t hash = offset_basis;
  std::uint64_t samples = 0;

  void update(std::span<const std::int16_t> audio) noexcept {
    const auto* p = reinterpret_cast<const unsigned char*>(audio.data());
    for (std::size_t i = 0; i < audio.size_bytes(); ++i)
      hash = (hash ^ p[i]) * prime;
    samples += audio.size();
  }
  friend constexpr bool operator==(const audio_digest&, const audio_digest&) = default;
};

// One line per request that differs between run `a` and run `b` (missing from one, other length,
// other bytes); empty when the runs are byte-identical.
template <class Id>
std::vector<std::string> compare_runs(const std::map<Id, audio_digest>& a, const std::map<Id, audio_digest>& b) {
  std::vector<std::string> out;
  auto hex = [](std::uint64_t v) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string s(16, '0');
    for (int i = 15; i >= 0; --i, v >>= 4)
      s[std::size_t(i)] = digits[v & 15u];
    return s;
  };
  for (const auto& [id, da] : a) {
    const auto it = b.find(id);
    if (it == b.end()) {
      out.push_back("request " + std::to_string(id) + ": in the first run only (" + std::to_string(da.samples) +
                    " samples)");
    } else if (!(it->second == da)) {
      out.push_back("request " + std::to_string(id) + ": " + std::to_string(da.samples) + " samples, hash " + hex(da.hash) +
                    " in the first run; " + std::to_string(it->second.samples) + " samples, hash " +
                    hex(it->second.hash) + " in the second");
    }
  }
  for (const auto& [id, db] : b)
    if (!a.contains(id))
      out.push_back("request " + std::to_string(id) + ": in the second run only (" + std::to_string(db.samples) +
                    " samples)");
  return out;
}

} // namespace qwen3_tts
