// One safetensors file, memory-mapped and validated in full before any tensor is handed out.
//
// Format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N, N bytes of
// JSON mapping each tensor name to {dtype, shape, data_offsets: [begin, end)} (offsets relative to the
// byte after the header), an optional "__metadata__" map of strings, then the data. Every check that a
// malformed or truncated file could fail runs in the constructor, so a tensor_view, once handed out, always
// lies inside the mapping and holds exactly the bytes its dtype and shape need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace qwen3_tts {

// Every problem with a checkpoint's files: the message names the file, the tensor or field, what was
// wrong, and what to do about it.
struct checkpoint_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The safetensors dtypes. The weights of Qwen3-TTS are BF16, F16 or F32; the integer types are read for
// fixtures (code sequences); the rest are recognised so that a file holding them opens, and are refused
// with a message only when a caller converts them.
enum class dtype : std::uint8_t { boolean, u8, i8, i16, u16, i32, u32, i64, u64, f8_e4m3, f8_e5m2, f16, bf16, f32, f64 };

std::string_view dtype_name(dtype type) noexcept; // as the header spells it: "BF16"
std::size_t dtype_size(dtype type) noexcept;      // bytes an element

struct tensor_view {
  std::string name;
  qwen3_tts::dtype dtype;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes; // inside the file's mapping: valid while the file (or store) lives
  std::filesystem::path file;

  std::int64_t numel() const noexcept;
};

std::string shape_string(std::span<const std::int64_t> shape); // "[1280, 64]"

// The tensor's values as float32 (BF16, F16 and F32 sources); any other dtype is a checkpoint_error.
std::vector<float> to_f32(const tensor_view& view);
// The tensor's values as int64 (I32 and I64 sources: code sequences); any other dtype is a checkpoint_error.
std::vector<std::int64_t> to_i64(const tensor_view& view);

namespace detail {
class mapped_file; // RAII mmap of a whole file, or its contents in memory (safetensors.cpp)
}

class safetensors_file {
public:
  // Maps and validates the file; throws checkpoint_error naming the file (and tensor) on any defect.
  explicit safetensors_file(const std::filesystem::path& path);
  // The same validation over a file's contents already in memory (tests, the fuzz target); `path` only names
  // the file in messages. The views point into `contents`, which the object keeps.
  safetensors_file(const std::filesystem::path& path, std::vector<std::byte> contents);
  ~safetensors_file();
  safetensors_file(safetensors_file&&) noexcept;
  safetensors_file& operator=(safetensors_file&&) noexcept;
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  // In the order of their data in the file.
  std::span<const tensor_view> tensors() const noexcept { return tensors_; }
  const tensor_view* find(std::string_view name) const noexcept;
  // The header's "__metadata__" (empty when absent).
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

private:
  void validate(); // every check, over map_'s bytes (both constructors)

  std::filesystem::path path_;
  std::unique_ptr<detail::mapped_file> map_;
  std::vector<tensor_view> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

} // namespace qwen3_tts
