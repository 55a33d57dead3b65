// Loading and encoding of the text tokenizer; see tokenizer.hpp for what it reproduces.
#include "tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

namespace qwen3_tts {
namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw std::runtime_error(file.string() + ": " + what);
}

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, "cannot be opened (is the folder a checkpoint in the Hugging Face layout?)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

json read_json(const std::filesystem::path& file) {
  try {
    return json::parse(read_file(file));
  } catch (const json::exception& e) { // parse_error, and out_of_range for a number such as 1e400
    fail(file, std::string("is not valid JSON: ") + e.what());
  }
}

// GPT-2's byte-to-character table: byte-level BPE spells each byte as one printable character, the
// printable Latin-1 bytes as themselves and the rest as U+0100 and up, in byte order.
std::array<std::string, 256> byte_spellings() {
  auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff); };
  std::array<std::string, 256> out;
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const int c = printable(b) ? b : 256 + extra++;
    std::string s;
    if (c < 0x80) s.push_back(static_cast<char>(c));
    else s = {static_cast<char>(0xc0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3f))};
    out[b] = s;
  }
  return out;
}

std::string_view trim(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_ws(std::string_view s) {
  std::vector<std::string_view> parts;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
    if (j > i) parts.push_back(s.substr(i, j - i));
    i = j;
  }
  return parts;
}

// The release numbers of a version string and whether a pre-release or dev suffix follows them
// ("5.0.0rc1" sorts below "5.0.0", as packaging.version has it).
struct version {
  std::vector<int> release;
  bool pre = false;
  bool operator<(const version& o) const {
    const std::size_t n = std::max(release.size(), o.release.size());
    for (std::size_t i = 0; i < n; ++i) {
      const int a = i < release.size() ? release[i] : 0, b = i < o.release.size() ? o.release[i] : 0;
      if (a != b) return a < b;
    }
    return pre && !o.pre;
  }
};

version parse_version(std::string_view s) {
  version v;
  std::size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    int n = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') n = n * 10 + (s[i++] - '0');
    v.release.push_back(n);
    if (i + 1 < s.size() && s[i] == '.' && s[i + 1] >= '0' && s[i + 1] <= '9') ++i;
    else break;
  }
  const std::string_view rest = s.substr(i);
  v.pre = rest.starts_with("a") || rest.starts_with("b") || rest.starts_with("rc") || rest.starts_with(".dev") ||
          rest.starts_with("dev");
  return v;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// Byte offset of the first invalid UTF-8 sequence, or npos.
std::size_t invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  std::size_t at = 0;
  while (at < s.size()) {
    if (static_cast<unsigned char>(s[at]) < 0x80) {
      ++at;
      continue;
    }
    utf8proc_int32_t c = 0;
    const auto len = utf8proc_iterate(p + at, static_cast<utf8proc_ssize_t>(s.size() - at), &c);
    if (len <= 0) return at;
    at += static_cast<std::size_t>(len);
  }
  return std::string_view::npos;
}

}  // namespace

text_tokenizer text_tokenizer::from_folder(const std::filesystem::path& dir, std::optional<split_regex> regex) {
  text_tokenizer t;

  const auto vocab_file = dir / "vocab.json";
  const json vocab_json = read_json(vocab_file);
  if (!vocab_json.is_object()) fail(vocab_file, "must be a JSON object of token -> id, found " + std::string(vocab_json.type_name()));
  std::unordered_map<std::string, token_id> vocab;
  vocab.reserve(vocab_json.size());
  for (const auto& [token, id] : vocab_json.items()) {
    if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > INT32_MAX)
      fail(vocab_file, "token \"" + token + "\" has id " + id.dump() + "; ids must be integers from 0");
    vocab.emplace(token, id.get<token_id>());
  }
  t.vocab_size_ = vocab.size();

  const auto spellings = byte_spellings();
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab.find(spellings[b]);
    if (it == vocab.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", b);
      fail(vocab_file, "lacks the byte token \"" + spellings[b] + "\" for byte " + hex +
                           "; a byte-level BPE vocabulary holds all 256");
    }
    t.byte_token_[b] = it->second;
  }

  const auto merges_file = dir / "merges.txt";
  const std::string merges_text = read_file(merges_file);
  std::istringstream lines(merges_text);
  std::string line;
  std::int32_t rank = 0;
  t.merges_.reserve(vocab.size());
  for (std::size_t number = 1; std::getline(lines, line); ++number) {
    const std::string_view l = trim(line);
    if (l.empty() || (number == 1 && l.starts_with("#version:"))) continue;
    const auto parts = split_ws(l);
    const std::string where = "line " + std::to_string(number) + " (\"" + std::string(l) + "\")";
    if (parts.size() != 2)
      fail(merges_file, where + ": a merge is two tokens separated by a space, found " + std::to_string(parts.size()));
    const std::string a(parts[0]), b(parts[1]), ab = a + b;
    for (const std::string* part : {&a, &b, &ab})
      if (!vocab.contains(*part))
        fail(merges_file, where + ": \"" + *part + "\" is not in vocab.json; every merge's parts and result must be");
    // A repeated pair takes its later rank, as tokenizers' BPE builder does.
    t.merges_[pair_key(vocab[a], vocab[b])] = merge{rank++, vocab[ab]};
  }

  const auto config_file = dir / "tokenizer_config.json";
  const json config = read_json(config_file);
  if (config.contains("added_tokens_decoder")) {
    for (const auto& [key, entry] : config["added_tokens_decoder"].items()) {
      const std::string where = "added_tokens_decoder[\"" + key + "\"]";
      token_id id = 0;
      try {
        std::size_t used = 0;
        id = std::stoi(key, &used);
        if (used != key.size() || id < 0) throw std::invalid_argument(key);
      } catch (const std::exception&) {
        fail(config_file, where + ": the key must be a token id (a non-negative integer)");
      }
      if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string() ||
          entry["content"].get<std::string>().empty())
        fail(config_file, where + ": needs a non-empty \"content\" string");
      for (const char* flag : {"lstrip", "rstrip", "single_word", "normalized"})
        if (entry.value(flag, false))
          fail(config_file, where + " (" + entry["content"].get<std::string>() + "): \"" + flag +
                                "\": true is not supported (Qwen's tokens have it false); set it false or extend "
                                "the tokenizer's added-token matching");
      t.added_.push_back({entry["content"].get<std::string>(), id, entry.value("special", false)});
    }
  }
  std::stable_sort(t.added_.begin(), t.added_.end(),
                   [](const added_token& a, const added_token& b) { return a.content.size() > b.content.size(); });
  for (const auto& a : t.added_) t.added_first_byte_[static_cast<unsigned char>(a.content[0])] = true;

  t.regex_ = regex ? *regex : official_loader_regex(dir, t.vocab_size_);
  return t;
}

token_id text_tokenizer::added_id(std::string_view content) const {
  for (const auto& a : added_)
    if (a.content == content) return a.id;
  throw std::runtime_error("the tokenizer has no added token \"" + std::string(content) +
                           "\"; tokenizer_config.json's added_tokens_decoder lists the ones it has");
}

std::vector<token_id> text_tokenizer::encode(std::string_view text) const {
  std::vector<token_id> out;
  encode(text, out);
  return out;
}

void text_tokenizer::encode(std::string_view text, std::vector<token_id>& out) const {
  if (const std::size_t bad = invalid_utf8_at(text); bad != std::string_view::npos)
    throw std::runtime_error("text to encode is not valid UTF-8 at byte " + std::to_string(bad) + " of " +
                             std::to_string(text.size()));
  // Added tokens first, leftmost then longest (added_ is sorted longest first).
  std::size_t segment = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!added_first_byte_[static_cast<unsigned char>(text[i])]) continue;
    for (const auto& a : added_) {
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      encode_segment(text.substr(segment, i - segment), out);
      out.push_back(a.id);
      i += a.content.size() - 1;
      segment = i + 1;
      break;
    }
  }
  encode_segment(text.substr(segment), out);
}

void text_tokenizer::encode_segment(std::string_view raw, std::vector<token_id>& out) const {
  if (raw.empty()) return;
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(nullptr, &std::free);
  std::string_view text = raw;
  if (!is_ascii(raw)) {  // ASCII is its own NFC
    utf8proc_uint8_t* nfc = nullptr;
    const auto len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(raw.data()),
                                  static_cast<utf8proc_ssize_t>(raw.size()), &nfc,
                                  static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (len < 0) throw std::runtime_error(std::string("NFC normalisation failed: ") + utf8proc_errmsg(len));
    owned.reset(nfc);
    text = std::string_view(reinterpret_cast<const char*>(nfc), static_cast<std::size_t>(len));
  }
  thread_local std::vector<piece> pieces;
  pieces.clear();
  pretokenize(text, regex_, pieces);
  for (const piece& p : pieces) encode_piece(text.substr(p.offset, p.length), out);
}

// BPE over one piece: start from its bytes, and repeatedly merge the adjacent pair of lowest merge rank
// (leftmost among equals), as tokenizers' BPE::merge_word does: a heap of candidate pairs, each checked
// against the current symbols when it comes up, so a piece of n bytes costs O(n log n).
void text_tokenizer::encode_piece(std::string_view bytes, std::vector<token_id>& out) const {
  const std::size_t n = bytes.size();
  if (n == 1) {
    out.push_back(byte_token_[static_cast<unsigned char>(bytes[0])]);
    return;
  }
  struct symbol {
    token_id id;
    std::int32_t prev, next;
    bool alive;
  };
  struct candidate {
    std::int32_t rank, pos;
    bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<symbol> sym;      // reused across calls: no allocation once warm
  thread_local std::vector<candidate> heap;  // a min-heap on (rank, pos) through std::greater
  sym.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    sym[i] = {byte_token_[static_cast<unsigned char>(bytes[i])], static_cast<std::int32_t>(i) - 1,
              i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1, true};
  heap.clear();
  auto offer = [&](std::int32_t pos) {
    const std::int32_t next = sym[pos].next;
    if (next < 0) return;
    if (const auto it = merges_.find(pair_key(sym[pos].id, sym[next].id)); it != merges_.end()) {
      heap.push_back({it->second.rank, pos});
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    }
  };
  for (std::size_t i = 0; i + 1 < n; ++i) offer(static_cast<std::int32_t>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const candidate c = heap.back();
    heap.pop_back();
    symbol& left = sym[c.pos];
    if (!left.alive || left.next < 0) continue;
    const auto it = merges_.find(pair_key(left.id, sym[left.next].id));
    if (it == merges_.end() || it->second.rank != c.rank) continue;  // stale: a neighbour changed
    symbol& right = sym[left.next];
    left.id = it->second.result;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = c.pos;
    if (left.prev >= 0) offer(left.prev);
    offer(c.pos);
  }
  for (std::int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

split_regex official_loader_regex(const std::filesystem::path& dir, std::size_t vocab_size) {
  const auto config_file = dir / "config.json";
  if (vocab_size <= 100000 || !std::filesystem::exists(config_file)) return split_regex::qwen2;
  const json config = read_json(config_file);
  const auto text = [&](const char* key) -> std::optional<std::string> {
    if (!config.contains(key) || config[key].is_null()) return std::nullopt;
    if (!config[key].is_string()) fail(config_file, std::string("\"") + key + "\" must be a string, found " + config[key].dump());
    return config[key].get<std::string>();
  };
  const auto tv = text("transformers_version");
  const auto model_type = text("model_type");
  if (tv) {
    const version v = parse_version(*tv);
    if (!(v < version{{5, 0, 0}})) return split_regex::qwen2;
    if (!(version{{4, 57, 2}} < v)) {
      static constexpr std::string_view mistral_types[] = {"mistral", "mistral3", "voxtral", "ministral", "pixtral"};
      if (model_type && std::find(std::begin(mistral_types), std::end(mistral_types), *model_type) == std::end(mistral_types))
        return split_regex::qwen2;
    }
  }
  return split_regex::mistral_fix;
}

namespace {
std::vector<token_id> encode_concat(const text_tokenizer& tok, std::initializer_list<std::string_view> parts) {
  std::string s;
  for (const auto p : parts) s += p;
  return tok.encode(s);
}
}  // namespace

std::vector<token_id> assistant_text_ids(const text_tokenizer& tok, std::string_view text) {
  return encode_concat(tok, {"<|im_start|>assistant\n", text, "<|im_end|>\n<|im_start|>assistant\n"});
}

std::vector<token_id> ref_text_ids(const text_tokenizer& tok, std::string_view ref_text) {
  return encode_concat(tok, {"<|im_start|>assistant\n", ref_text, "<|im_end|>\n"});
}

std::optional<std::vector<token_id>> instruct_ids(const text_tokenizer& tok, std::string_view instruct) {
  if (instruct.empty()) return std::nullopt;
  return encode_concat(tok, {"<|im_start|>user\n", instruct, "<|im_end|>\n"});
}

}  // namespace qwen3_tts
