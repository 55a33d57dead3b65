// A string usable as a template argument: the keys and names of a model description
// (`recurrent_pool<"codec_state", ...>`) are carried in the types, so they show in diagnostics.
#pragma once

#include <cstddef>
#include <string_view>

namespace mstar {

template <std::size_t N>
struct fixed_string {
  char chars[N]{};

  constexpr fixed_string(const char (&s)[N]) noexcept {
    for (std::size_t i = 0; i < N; ++i) chars[i] = s[i];
  }
  constexpr std::string_view view() const noexcept { return {chars, N - 1}; }
  constexpr operator std::string_view() const noexcept { return view(); }
};

} // namespace mstar
