// The two Split patterns as hand-written matchers. Oniguruma tries the alternatives of a pattern in
// order at each position and takes the first that matches (not the longest); inside an alternative,
// greedy quantifiers take as much as they can and give back one item at a time until the rest
// matches. Each function below returns the length (in code points) of what its alternative matches at
// position i, or 0, following exactly that order.
#include "pretokenize.hpp"

#include <utf8proc.h>

namespace qwen3_tts {
namespace {

// Category bits of one code point.
enum : std::uint16_t {
  lu = 1 << 0, ll = 1 << 1, lt = 1 << 2, lm = 1 << 3, lo = 1 << 4,  // the letter categories \p{L}
  mark = 1 << 5,                                                      // \p{M}: Mn, Mc, Me
  number = 1 << 6,                                                    // \p{N}: Nd, Nl, No
  space = 1 << 7,                                                     // \s
  cr_lf = 1 << 8,                                                     // \r or \n
  apostrophe = 1 << 9,                                                // ' (U+0027)
  slash = 1 << 10,                                                    // / (U+002F)
  letter = lu | ll | lt | lm | lo,
  upperish = lu | lt | lm | lo | mark,  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  lowerish = ll | lm | lo | mark,       // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
};

// Oniguruma's \s for Unicode text is the White_Space property.
bool white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::uint16_t classify(char32_t c) {
  std::uint16_t bits = 0;
  if (white_space(c)) bits |= space;
  if (c == '\r' || c == '\n') bits |= cr_lf;
  if (c == '\'') bits |= apostrophe;
  if (c == '/') bits |= slash;
  if (c < 0x80) {  // ASCII without the table
    if (c >= 'A' && c <= 'Z') bits |= lu;
    else if (c >= 'a' && c <= 'z') bits |= ll;
    else if (c >= '0' && c <= '9') bits |= number;
    return bits;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
  case UTF8PROC_CATEGORY_LU: bits |= lu; break;
  case UTF8PROC_CATEGORY_LL: bits |= ll; break;
  case UTF8PROC_CATEGORY_LT: bits |= lt; break;
  case UTF8PROC_CATEGORY_LM: bits |= lm; break;
  case UTF8PROC_CATEGORY_LO: bits |= lo; break;
  case UTF8PROC_CATEGORY_MN:
  case UTF8PROC_CATEGORY_MC:
  case UTF8PROC_CATEGORY_ME: bits |= mark; break;
  case UTF8PROC_CATEGORY_ND:
  case UTF8PROC_CATEGORY_NL:
  case UTF8PROC_CATEGORY_NO: bits |= number; break;
  default: break;
  }
  return bits;
}

// The decoded text: one class word and one byte offset per code point (offsets has one extra entry,
// the end), plus the code points themselves for the case-insensitive contractions.
struct decoded {
  std::vector<char32_t> cp;
  std::vector<std::uint16_t> cls;
  std::vector<std::uint32_t> offsets;
  std::size_t n = 0;

  bool has(std::size_t i, std::uint16_t bits) const { return i < n && (cls[i] & bits) != 0; }
  bool lacks(std::size_t i, std::uint16_t bits) const { return i < n && (cls[i] & bits) == 0; }
  // Length of the run of code points from i that all carry one of `bits`.
  std::size_t run(std::size_t i, std::uint16_t bits) const {
    std::size_t j = i;
    while (has(j, bits)) ++j;
    return j - i;
  }
};

void decode(std::string_view text, decoded& d) {
  d.cp.clear();
  d.cls.clear();
  d.offsets.clear();
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  std::size_t at = 0;
  while (at < text.size()) {
    utf8proc_int32_t c = 0;
    auto len = utf8proc_iterate(p + at, static_cast<utf8proc_ssize_t>(text.size() - at), &c);
    if (len <= 0) len = 1, c = 0xfffd;  // unreachable for checked input; keeps the cover exact
    d.cp.push_back(static_cast<char32_t>(c));
    d.cls.push_back(classify(static_cast<char32_t>(c)));
    d.offsets.push_back(static_cast<std::uint32_t>(at));
    at += static_cast<std::size_t>(len);
  }
  d.offsets.push_back(static_cast<std::uint32_t>(text.size()));
  d.n = d.cp.size();
}

// [^\r\n\p{L}\p{N}]: the optional leading character of the word alternatives.
constexpr std::uint16_t not_word_lead = cr_lf | letter | number;
// [^\s\p{L}\p{N}]: the symbol class.
constexpr std::uint16_t not_symbol = space | letter | number;

// (?i:'s|'t|'re|'ve|'m|'ll|'d): tried in this order, case-insensitively. Under Unicode case folding
// U+017F (long s) is an s as well; no other character folds to one of these letters.
std::size_t contraction(const decoded& d, std::size_t i) {
  if (!d.has(i, apostrophe)) return 0;
  auto is = [&](std::size_t k, char lower) {
    if (k >= d.n) return false;
    const char32_t c = d.cp[k];
    return c == static_cast<char32_t>(lower) || c == static_cast<char32_t>(lower - 'a' + 'A') ||
           (lower == 's' && c == 0x17f);
  };
  if (is(i + 1, 's') || is(i + 1, 't')) return 2;
  if (is(i + 1, 'r') && is(i + 2, 'e')) return 3;
  if (is(i + 1, 'v') && is(i + 2, 'e')) return 3;
  if (is(i + 1, 'm')) return 2;
  if (is(i + 1, 'l') && is(i + 2, 'l')) return 3;
  if (is(i + 1, 'd')) return 2;
  return 0;
}

// [^\r\n\p{L}\p{N}]?\p{L}+ (Qwen2). With the lead taken, \p{L}+ must follow; without it, the lead
// position itself must be a letter (and then it was no lead).
std::size_t qwen2_word(const decoded& d, std::size_t i) {
  if (d.lacks(i, not_word_lead) && d.has(i + 1, letter)) return 1 + d.run(i + 1, letter);
  return d.run(i, letter);
}

// U* then W+ from j, with U = upperish and W = lowerish (mistral_fix, first word alternative).
// U* takes the whole run, then gives back one at a time until a W follows; W+ then takes its run.
std::size_t upper_star_lower_plus(const decoded& d, std::size_t j) {
  for (std::size_t u = d.run(j, upperish) + 1; u-- > 0;)
    if (d.has(j + u, lowerish)) return u + d.run(j + u, lowerish);
  return 0;
}

// U+ then W* from j (second word alternative): U+ takes its whole run and W* always succeeds.
std::size_t upper_plus_lower_star(const decoded& d, std::size_t j) {
  const std::size_t u = d.run(j, upperish);
  return u == 0 ? 0 : u + d.run(j + u, lowerish);
}

// [^\r\n\p{L}\p{N}]? followed by `rest`: the lead is tried taken first, then left out.
template <class Rest>
std::size_t with_optional_lead(const decoded& d, std::size_t i, Rest rest) {
  if (d.lacks(i, not_word_lead))
    if (const std::size_t r = rest(d, i + 1)) return 1 + r;
  return rest(d, i);
}

// ' ?[^\s\p{L}\p{N}]+[\r\n]*' (Qwen2, tail = cr_lf) and ' ?[^\s\p{L}\p{N}]+[\r\n/]*' (mistral_fix, tail =
// cr_lf | slash). The symbol run stops at white space, a letter or a digit; the mistral tail then goes on
// through line breaks and slashes mixed (" <=\n/" is one piece), while Qwen2's takes line breaks only.
std::size_t symbols(const decoded& d, std::size_t i, std::uint16_t tail) {
  std::size_t j = i;
  if (j < d.n && d.cp[j] == ' ' && d.lacks(j + 1, not_symbol)) ++j;  // the space only with a symbol after it
  std::size_t s = 0;
  while (d.lacks(j + s, not_symbol)) ++s;
  if (s == 0) return 0;
  j += s;
  return j - i + d.run(j, tail);
}

// \s*[\r\n]+: \s* takes the whole white-space run (line breaks included) and gives back until a line
// break follows, so the match ends just after the run's last \r or \n.
std::size_t spaces_to_line_break(const decoded& d, std::size_t i) {
  const std::size_t w = d.run(i, space);
  for (std::size_t u = w; u-- > 0;)
    if (d.has(i + u, cr_lf)) return u + 1;
  return 0;
}

// \s+(?!\S): the whole run at the end of the text; otherwise all but its last character, which then
// stays to lead the next word (" world").
std::size_t spaces_not_before_text(const decoded& d, std::size_t i) {
  const std::size_t w = d.run(i, space);
  if (w == 0) return 0;
  if (i + w == d.n) return w;
  return w >= 2 ? w - 1 : 0;
}

std::size_t match_qwen2(const decoded& d, std::size_t i) {
  if (std::size_t m = contraction(d, i)) return m;
  if (std::size_t m = qwen2_word(d, i)) return m;
  if (d.has(i, number)) return 1;
  if (std::size_t m = symbols(d, i, cr_lf)) return m;
  if (std::size_t m = spaces_to_line_break(d, i)) return m;
  if (std::size_t m = spaces_not_before_text(d, i)) return m;
  return d.run(i, space);
}

std::size_t match_mistral_fix(const decoded& d, std::size_t i) {
  if (std::size_t m = with_optional_lead(d, i, upper_star_lower_plus)) return m;
  if (std::size_t m = with_optional_lead(d, i, upper_plus_lower_star)) return m;
  if (d.has(i, number)) return 1;
  if (std::size_t m = symbols(d, i, cr_lf | slash)) return m;
  if (std::size_t m = spaces_to_line_break(d, i)) return m;
  if (std::size_t m = spaces_not_before_text(d, i)) return m;
  return d.run(i, space);
}

}  // namespace

const char* regex_name(split_regex r) noexcept { return r == split_regex::qwen2 ? "qwen2" : "mistral_fix"; }

void pretokenize(std::string_view text, split_regex regex, std::vector<piece>& out) {
  thread_local decoded d;  // reused: encoding many short texts should not allocate per call
  decode(text, d);
  const auto match = regex == split_regex::qwen2 ? match_qwen2 : match_mistral_fix;
  auto emit = [&](std::size_t from, std::size_t to) {
    out.push_back({d.offsets[from], d.offsets[to] - d.offsets[from]});
  };
  std::size_t gap = 0;  // start of the unmatched stretch before i (isolated: it is a piece too)
  for (std::size_t i = 0; i < d.n;) {
    if (const std::size_t m = match(d, i)) {
      if (gap < i) emit(gap, i);
      emit(i, i + m);
      i += m;
      gap = i;
    } else {
      ++i;
    }
  }
  if (gap < d.n) emit(gap, d.n);
}

}  // namespace qwen3_tts
