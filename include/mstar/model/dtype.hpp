// Element types of resource state, as plain tags: host code names bf16 and f16 without CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mstar {

enum class dtype : std::uint8_t { f32, f16, bf16, i32, u8 };

// 2-byte storage types; kernels reinterpret them as __half / __nv_bfloat16.
struct f16 {
  std::uint16_t bits;
};
struct bf16 {
  std::uint16_t bits;
};

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr dtype value = dtype::f32;
};
template <>
struct dtype_of<f16> {
  static constexpr dtype value = dtype::f16;
};
template <>
struct dtype_of<bf16> {
  static constexpr dtype value = dtype::bf16;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr dtype value = dtype::i32;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr dtype value = dtype::u8;
};

constexpr std::size_t size_of(dtype t) {
  switch (t) {
  case dtype::f32: return 4;
  case dtype::f16: return 2;
  case dtype::bf16: return 2;
  case dtype::i32: return 4;
  case dtype::u8: return 1;
  }
  return 0;
}

constexpr std::string_view name_of(dtype t) {
  switch (t) {
  case dtype::f32: return "f32";
  case dtype::f16: return "f16";
  case dtype::bf16: return "bf16";
  case dtype::i32: return "i32";
  case dtype::u8: return "u8";
  }
  return "?";
}

} // namespace mstar
