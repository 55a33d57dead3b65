// libFuzzer target for the text tokenizer, which reads what an HTTP client sends (`input`, `instructions`):
// Qwen's byte-level BPE of the tiny06 fixture checkpoint (examples/qwen3_tts/text: its pre-tokenizer over
// utf8proc, the BPE, the added tokens, the chat templates the wrapper applies). Built and run by run_fuzz.sh
// with clang++ -fsanitize=fuzzer,address,undefined; MSTAR_FUZZ_TOKENIZER names the folder. Beyond "no crash,
// no hang, no leak", it checks the contract: text that is not valid UTF-8 is refused with std::runtime_error
// saying so, anything else is encoded, to at least one id when not empty, every id is a token of the vocabulary
// or an added token, a text's ids are the same each time, and so are the chat templates' ids.
#include "contract.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer.hpp"

namespace {
using mstar_fuzz::broken;

const qwen3_tts::text_tokenizer& tokenizer() {
  static const qwen3_tts::text_tokenizer tok = [] {
    const char* dir = std::getenv("MSTAR_FUZZ_TOKENIZER");
    if (dir == nullptr) broken("MSTAR_FUZZ_TOKENIZER names no checkpoint folder");
    return qwen3_tts::text_tokenizer::from_folder(dir);
  }();
  return tok;
}

bool known(const qwen3_tts::text_tokenizer& tok, qwen3_tts::token_id id) {
  if (id >= 0 && std::size_t(id) < tok.vocab_size()) return true;
  const auto& added = tok.added_tokens();
  return std::any_of(added.begin(), added.end(), [&](const auto& a) { return a.id == id; });
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& tok = tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<qwen3_tts::token_id> ids;
  try {
    ids = tok.encode(text);
  } catch (const std::runtime_error& e) {
    if (std::string_view(e.what()).find("not valid UTF-8") == std::string_view::npos)
      broken("a refusal that does not say the text is not valid UTF-8");
    return 0;
  }
  for (const auto id : ids)
    if (!known(tok, id)) broken("an id outside the vocabulary and the added tokens");
  if (!text.empty() && ids.empty()) broken("a non-empty text encoded to no ids");
  if (tok.encode(text) != ids) broken("the same text encoded twice gave other ids");
  const auto framed = qwen3_tts::assistant_text_ids(tok, text);
  if (framed.size() < 5) broken("the assistant template gave fewer ids than its own tokens");
  for (const auto id : framed)
    if (!known(tok, id)) broken("a template id outside the vocabulary and the added tokens");
  (void)qwen3_tts::instruct_ids(tok, text);
  return 0;
}
