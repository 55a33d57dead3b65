// Reading and validating safetensors files (see safetensors.hpp).
#include "qwen3_tts/checkpoint/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

namespace qwen3_tts {

namespace {

constexpr std::string_view redo = "re-download the checkpoint or write it again with safetensors";

struct dtype_entry {
  std::string_view name;
  dtype type;
  std::size_t size;
};

constexpr std::array<dtype_entry, 15> dtype_table{{
    {"BOOL", dtype::boolean, 1}, {"U8", dtype::u8, 1},   {"I8", dtype::i8, 1},       {"I16", dtype::i16, 2},
    {"U16", dtype::u16, 2},      {"I32", dtype::i32, 4}, {"U32", dtype::u32, 4},     {"I64", dtype::i64, 8},
    {"U64", dtype::u64, 8},      {"F8_E4M3", dtype::f8_e4m3, 1}, {"F8_E5M2", dtype::f8_e5m2, 1},
    {"F16", dtype::f16, 2},      {"BF16", dtype::bf16, 2}, {"F32", dtype::f32, 4},   {"F64", dtype::f64, 8},
}};

const dtype_entry* dtype_by_name(std::string_view name) {
  for (const auto& e : dtype_table)
    if (e.name == name) return &e;
  return nullptr;
}

std::string where(const std::filesystem::path& file, std::string_view tensor = {}) {
  std::string s = file.string();
  if (!tensor.empty()) s += ": tensor '" + std::string(tensor) + "'";
  return s;
}

[[noreturn]] void fail(const std::filesystem::path& file, std::string_view tensor, const std::string& what) {
  throw checkpoint_error(where(file, tensor) + ": " + what + "; " + std::string(redo));
}

float bf16_to_f32(std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t{bits} << 16); }

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13); // inf / nan
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else { // subnormal half: normalise into a float32 exponent
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

template <class T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v); // views need not be aligned for T
  return v;
}

} // namespace

std::string_view dtype_name(dtype type) noexcept {
  for (const auto& e : dtype_table)
    if (e.type == type) return e.name;
  return "?";
}

std::size_t dtype_size(dtype type) noexcept {
  for (const auto& e : dtype_table)
    if (e.type == type) return e.size;
  return 0;
}

std::int64_t tensor_view::numel() const noexcept {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_string(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<float> to_f32(const tensor_view& view) {
  const auto n = static_cast<std::size_t>(view.numel());
  std::vector<float> out(n);
  const std::byte* p = view.bytes.data();
  switch (view.dtype) {
  case dtype::bf16:
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load<std::uint16_t>(p + 2 * i));
    break;
  case dtype::f16:
    for (std::size_t i = 0; i < n; ++i) out[i] = f16_to_f32(load<std::uint16_t>(p + 2 * i));
    break;
  case dtype::f32:
    if (n) std::memcpy(out.data(), p, n * sizeof(float));
    break;
  default:
    throw checkpoint_error(where(view.file, view.name) + ": dtype " + std::string(dtype_name(view.dtype)) +
                           " cannot be read as float32 weights (BF16, F16 and F32 can); is this the tensor you meant, "
                           "and was the checkpoint exported in a supported precision?");
  }
  return out;
}

std::vector<std::int64_t> to_i64(const tensor_view& view) {
  const auto n = static_cast<std::size_t>(view.numel());
  std::vector<std::int64_t> out(n);
  const std::byte* p = view.bytes.data();
  switch (view.dtype) {
  case dtype::i32:
    for (std::size_t i = 0; i < n; ++i) out[i] = load<std::int32_t>(p + 4 * i);
    break;
  case dtype::i64:
    if (n) std::memcpy(out.data(), p, n * sizeof(std::int64_t));
    break;
  default:
    throw checkpoint_error(where(view.file, view.name) + ": dtype " + std::string(dtype_name(view.dtype)) +
                           " cannot be read as integers (I32 and I64 can); is this the tensor you meant?");
  }
  return out;
}

namespace detail {

class mapped_file {
public:
  explicit mapped_file(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      throw checkpoint_error(path.string() + ": cannot open (" + std::strerror(errno) +
                             "); check that the file exists and is readable");
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw checkpoint_error(path.string() + ": not a regular file; point at the checkpoint's .safetensors file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw checkpoint_error(path.string() + ": cannot map (" + std::strerror(err) + "); check free address space");
      }
      data_ = static_cast<const std::byte*>(p);
    }
    ::close(fd); // the mapping keeps the file's pages
  }
  explicit mapped_file(std::vector<std::byte> contents)
      : owned_(std::move(contents)), data_(owned_.data()), size_(owned_.size()), mapped_(false) {}
  ~mapped_file() {
    if (mapped_ && data_) ::munmap(const_cast<std::byte*>(data_), size_);
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }

private:
  std::vector<std::byte> owned_; // the contents, when not mapped
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = true;
};

} // namespace detail

namespace {

// A JSON value that must be a non-negative integer (shape entries, offsets).
std::uint64_t unsigned_field(const nlohmann::json& v, const std::filesystem::path& file, std::string_view tensor,
                             std::string_view field) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
  fail(file, tensor, std::string(field) + " holds " + v.dump() + ", not a non-negative integer");
}

nlohmann::json parse_header(std::span<const std::byte> header, const std::filesystem::path& file) {
  const auto* chars = reinterpret_cast<const char*>(header.data());
  nlohmann::json j;
  // A name given twice would silently keep its last entry; the first one's bytes would then go unchecked.
  std::set<std::string> names;
  std::string duplicate;
  const auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && !names.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    j = nlohmann::json::parse(chars, chars + header.size(), on_event);
  } catch (const nlohmann::json::exception& e) { // parse_error, and out_of_range for a number such as 1e400
    fail(file, {}, std::string("the header is not valid JSON (") + e.what() + ")");
  }
  if (!duplicate.empty()) fail(file, duplicate, "the header names this tensor twice");
  if (!j.is_object()) fail(file, {}, "the header is JSON but not an object of tensors (it is " + std::string(j.type_name()) + ")");
  return j;
}

std::map<std::string, std::string> parse_metadata(const nlohmann::json& m, const std::filesystem::path& file) {
  if (!m.is_object()) fail(file, "__metadata__", "must be an object of strings, found " + std::string(m.type_name()));
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : m.items()) {
    if (!value.is_string())
      fail(file, "__metadata__", "entry '" + key + "' must be a string, found " + value.dump());
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

} // namespace

safetensors_file::safetensors_file(const std::filesystem::path& path)
    : path_(path), map_(std::make_unique<detail::mapped_file>(path)) {
  validate();
}

safetensors_file::safetensors_file(const std::filesystem::path& path, std::vector<std::byte> contents)
    : path_(path), map_(std::make_unique<detail::mapped_file>(std::move(contents))) {
  validate();
}

void safetensors_file::validate() {
  const auto all = map_->bytes();
  if (all.size() < 8)
    fail(path_, {}, "truncated: " + std::to_string(all.size()) +
                        " bytes, but a safetensors file starts with an 8-byte header length");
  const auto header_len = load<std::uint64_t>(all.data()); // little-endian on every host we build for
  if (header_len > all.size() - 8)
    fail(path_, {}, "the header length " + std::to_string(header_len) + " runs past the end of the file (" +
                        std::to_string(all.size()) + " bytes): the file is truncated or not safetensors");
  // The format's own limit (the official reader's HeaderTooLarge): a hostile header of gigabytes would build a
  // JSON tree many times its size before any entry is checked.
  constexpr std::uint64_t max_header = 100'000'000;
  if (header_len > max_header)
    fail(path_, {}, "the header length " + std::to_string(header_len) + " is over the " + std::to_string(max_header) +
                        " bytes the safetensors format allows");
  const auto header = parse_header(all.subspan(8, header_len), path_);
  const auto data = all.subspan(8 + header_len);

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      metadata_ = parse_metadata(entry, path_);
      continue;
    }
    if (!entry.is_object()) fail(path_, name, "its header entry is " + std::string(entry.type_name()) + ", not an object");
    const auto dt = entry.find("dtype");
    const auto sh = entry.find("shape");
    const auto off = entry.find("data_offsets");
    if (dt == entry.end() || sh == entry.end() || off == entry.end())
      fail(path_, name, "its header entry lacks one of dtype, shape, data_offsets");
    if (!dt->is_string()) fail(path_, name, "dtype is " + dt->dump() + ", not a string");
    const auto* type = dtype_by_name(dt->get<std::string>());
    if (!type) fail(path_, name, "unknown dtype '" + dt->get<std::string>() + "' (known: BOOL, U8..U64, I8..I64, F8_E4M3, "
                                     "F8_E5M2, F16, BF16, F32, F64)");
    if (!sh->is_array()) fail(path_, name, "shape is " + sh->dump() + ", not an array");
    if (!off->is_array() || off->size() != 2) fail(path_, name, "data_offsets is " + off->dump() + ", not [begin, end]");

    tensor_view view{name, type->type, {}, {}, path_};
    // A hostile shape must not wrap the byte count around into a small number that happens to match.
    std::uint64_t bytes = type->size;
    bool overflow = false;
    // The element count as numel() forms it, extent by extent: an empty tensor's extents before its zero must
    // not overflow it either ([4234967296, 4294967296, 0] holds no bytes).
    std::uint64_t elements = 1;
    bool too_many = false;
    constexpr auto int64_max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    for (const auto& d : *sh) {
      const auto extent = unsigned_field(d, path_, name, "shape");
      if (extent > int64_max) overflow = true;
      view.shape.push_back(static_cast<std::int64_t>(extent));
      if (extent != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / extent) overflow = true;
      bytes *= extent;
      if (extent != 0 && elements > int64_max / extent) too_many = true;
      elements *= extent;
    }
    if (too_many && !overflow)
      fail(path_, name, "shape " + shape_string(view.shape) + " has more elements than a 64-bit count holds");
    const auto begin = unsigned_field((*off)[0], path_, name, "data_offsets[0]");
    const auto end = unsigned_field((*off)[1], path_, name, "data_offsets[1]");
    if (begin > end) fail(path_, name, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + ") end before they begin");
    if (end > data.size())
      fail(path_, name, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") run past the data section (" + std::to_string(data.size()) + " bytes): the file is truncated");
    if (overflow || bytes != end - begin)
      fail(path_, name, "shape " + shape_string(view.shape) + " of " + std::string(type->name) + " needs " +
                            (overflow ? std::string("more bytes than exist") : std::to_string(bytes) + " bytes") +
                            ", but data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + ") hold " +
                            std::to_string(end - begin));
    view.bytes = data.subspan(begin, end - begin);
    tensors_.push_back(std::move(view));
  }

  std::sort(tensors_.begin(), tensors_.end(), [&](const tensor_view& a, const tensor_view& b) {
    return a.bytes.data() != b.bytes.data() ? a.bytes.data() < b.bytes.data() : a.bytes.size() < b.bytes.size();
  });
  // In that order each non-empty tensor is checked against the one before it that reaches furthest: a tensor that
  // starts before that one's end overlaps it. (Only the one just before it would miss an overlap past an empty tensor
  // sorted between the two, or a long tensor that holds two others.) Empty tensors occupy no bytes and overlap
  // nothing.
  const tensor_view* furthest = nullptr;
  for (const auto& next : tensors_) {
    if (next.bytes.empty()) continue;
    if (furthest != nullptr && next.bytes.data() < furthest->bytes.data() + furthest->bytes.size()) {
      const auto at = [&](const tensor_view& t) {
        const auto b = static_cast<std::size_t>(t.bytes.data() - data.data());
        // Appended to one string: g++ 12's -Wrestrict misfires on "[" + std::string&& at -O2.
        std::string range = "[";
        range += std::to_string(b);
        range += ", ";
        range += std::to_string(b + t.bytes.size());
        range += ")";
        return range;
      };
      fail(path_, next.name,
           "its bytes " + at(next) + " overlap those of tensor '" + furthest->name + "' " + at(*furthest));
    }
    if (furthest == nullptr || next.bytes.data() + next.bytes.size() > furthest->bytes.data() + furthest->bytes.size())
      furthest = &next;
  }
  for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

safetensors_file::~safetensors_file() = default;
safetensors_file::safetensors_file(safetensors_file&&) noexcept = default;
safetensors_file& safetensors_file::operator=(safetensors_file&&) noexcept = default;

const tensor_view* safetensors_file::find(std::string_view name) const noexcept {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

} // namespace qwen3_tts
