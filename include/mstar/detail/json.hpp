// JSON string escaping shared by the writers of JSON output (trace.hpp's Chrome trace files,
// mstar-validate --json). Header-only and free of other mstar headers.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace mstar::detail {

// Appends s as the inside of a JSON string: quotes, backslashes and control characters escaped;
// valid UTF-8 passes through; each byte of an invalid sequence becomes U+FFFD, so the file always
// parses as UTF-8 JSON.
inline void append_json_escaped(std::string& out, std::string_view s) {
  auto cont = [&](std::size_t i) { return i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80; };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
          out += buf;
        } else {
          out += char(c);
        }
      }
      ++i;
      continue;
    }
    // Sequence length from the lead byte; overlong forms, surrogates and > U+10FFFF are rejected.
    std::size_t len = 0;
    if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
      len = 3;
    else if (c >= 0xF0 && c <= 0xF4)
      len = 4;
    bool ok = len != 0;
    for (std::size_t k = 1; ok && k < len; ++k)
      ok = cont(i + k);
    if (ok && len >= 3) {
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      if (c == 0xE0 && c1 < 0xA0) ok = false;
      if (c == 0xED && c1 >= 0xA0) ok = false;
      if (c == 0xF0 && c1 < 0x90) ok = false;
      if (c == 0xF4 && c1 >= 0x90) ok = false;
    }
    if (!ok) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    out.append(s.substr(i, len));
    i += len;
  }
}

// s as a complete JSON string literal, quotes included.
inline std::string json_quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  append_json_escaped(out, s);
  out += '"';
  return out;
}

} // namespace mstar::detail
