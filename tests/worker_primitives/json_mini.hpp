// A strict, minimal JSON reader (RFC 8259) for tests that check files the library writes (the trace
// file): no extensions, no trailing commas, control characters in strings refused, \u escapes and
// surrogate pairs decoded to UTF-8, invalid UTF-8 refused. It throws with the byte offset on error.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mstar::test::json {

struct value {
  enum class kind { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool b = false;
  double number = 0;
  std::string text;
  std::vector<value> items;
  // Object members as two parallel vectors: a pair<string, value> would need value complete here.
  std::vector<std::string> keys;
  std::vector<value> members;

  const value* find(std::string_view key) const {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &members[i];
    return nullptr;
  }
  const value& at(std::string_view key) const {
    if (const value* v = find(key)) return *v;
    throw std::out_of_range("json: no member '" + std::string(key) + "'");
  }
};

class parser {
public:
  explicit parser(std::string_view s) : s_(s) {}

  value parse_document() {
    skip_ws();
    value v = parse_value();
    skip_ws();
    if (i_ != s_.size()) fail("text after the top-level value");
    return v;
  }

private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("json: " + what + " at byte " + std::to_string(i_));
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  void literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) fail("bad literal");
    i_ += word.size();
  }

  value parse_value() {
    if (i_ >= s_.size()) fail("unexpected end");
    value v;
    switch (s_[i_]) {
    case '{': parse_object(v); break;
    case '[': parse_array(v); break;
    case '"':
      v.type = value::kind::string;
      v.text = parse_string();
      break;
    case 't': literal("true"), v.type = value::kind::boolean, v.b = true; break;
    case 'f': literal("false"), v.type = value::kind::boolean; break;
    case 'n': literal("null"); break;
    default: parse_number(v);
    }
    return v;
  }

  void parse_object(value& v) {
    v.type = value::kind::object;
    expect('{');
    skip_ws();
    if (eat('}')) return;
    for (;;) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '"') fail("expected a member name");
      std::string key = parse_string();
      skip_ws();
      expect(':');
      skip_ws();
      v.members.push_back(parse_value());
      v.keys.push_back(std::move(key));
      skip_ws();
      if (eat('}')) return;
      expect(',');
    }
  }

  void parse_array(value& v) {
    v.type = value::kind::array;
    expect('[');
    skip_ws();
    if (eat(']')) return;
    for (;;) {
      skip_ws();
      v.items.push_back(parse_value());
      skip_ws();
      if (eat(']')) return;
      expect(',');
    }
  }

  void parse_number(value& v) {
    const std::size_t start = i_;
    eat('-');
    if (eat('0')) {
    } else if (i_ < s_.size() && s_[i_] >= '1' && s_[i_] <= '9') {
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
        ++i_;
    } else {
      fail("bad number");
    }
    if (eat('.')) {
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_]))) fail("bad fraction");
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
        ++i_;
    }
    if (eat('e') || eat('E')) {
      if (!eat('+')) eat('-');
      if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_]))) fail("bad exponent");
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
        ++i_;
    }
    v.type = value::kind::number;
    v.number = std::strtod(std::string(s_.substr(start, i_ - start)).c_str(), nullptr);
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("short \\u escape");
    unsigned u = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      u <<= 4;
      if (c >= '0' && c <= '9')
        u |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f')
        u |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        u |= unsigned(c - 'A' + 10);
      else
        fail("bad hex digit");
    }
    return u;
  }

  static void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return out;
      }
      if (c < 0x20) fail("raw control character in a string");
      if (c == '\\') {
        ++i_;
        if (i_ >= s_.size()) fail("unterminated escape");
        const char e = s_[i_++];
        switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!eat('\\') || !eat('u')) fail("lone high surrogate");
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("lone low surrogate");
          }
          put_utf8(out, cp);
          break;
        }
        default: fail("unknown escape");
        }
        continue;
      }
      if (c < 0x80) {
        out += char(c);
        ++i_;
        continue;
      }
      std::size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
      if (len == 0 || c > 0xF4 || i_ + len > s_.size()) fail("invalid UTF-8");
      for (std::size_t k = 1; k < len; ++k)
        if ((static_cast<unsigned char>(s_[i_ + k]) & 0xC0) != 0x80) fail("invalid UTF-8 continuation");
      out.append(s_.substr(i_, len));
      i_ += len;
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

inline value parse(std::string_view text) { return parser(text).parse_document(); }

} // namespace mstar::test::json
