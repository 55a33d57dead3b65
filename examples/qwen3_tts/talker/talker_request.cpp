#include "talker_request.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "talker_checkpoint.hpp"

namespace qwen3_tts {

std::vector<std::int32_t> parse_ids(const std::string& text, const char* option) {
  std::vector<std::int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || v < 0 || v > 0x7fffffffL)
      throw std::invalid_argument(std::string(option) + ": \"" + item + "\" is not a token id (give ids as \"1,2,3\")");
    ids.push_back(std::int32_t(v));
  }
  if (ids.empty()) throw std::invalid_argument(std::string(option) + ": no ids given");
  return ids;
}

talker_sampling sampling_from(const std::string& model_dir) {
  talker_sampling s;
  std::ifstream f(model_dir + "/generation_config.json");
  if (!f) return s;
  const nlohmann::json g = nlohmann::json::parse(f, nullptr, false);
  if (!g.is_object()) throw std::runtime_error(model_dir + "/generation_config.json: not a JSON object");
  auto take = [&](const char* key, auto& field) {
    if (auto it = g.find(key); it != g.end() && !it->is_null()) {
      try {
        field = it->get<std::decay_t<decltype(field)>>();
      } catch (const nlohmann::json::exception&) {
        throw std::runtime_error(model_dir + "/generation_config.json: field \"" + key + "\" has the wrong type (" +
                                 it->type_name() + ")");
      }
    }
  };
  take("do_sample", s.talker.do_sample);
  take("top_k", s.talker.top_k);
  take("top_p", s.talker.top_p);
  take("temperature", s.talker.temperature);
  take("repetition_penalty", s.repetition_penalty);
  take("subtalker_dosample", s.sub.do_sample);
  take("subtalker_top_k", s.sub.top_k);
  take("subtalker_top_p", s.sub.top_p);
  take("subtalker_temperature", s.sub.temperature);
  int max_new_tokens = 0;
  take("max_new_tokens", max_new_tokens);
  if (max_new_tokens > 1) s.max_frames = max_new_tokens - 1;
  // Transformers' own generation-config key (the released checkpoints leave it out, and the reference's
  // generate() then masks the end token for 2 code-0 ids). A benchmark checkpoint of random weights sets it
  // to max_new_tokens so that every request makes exactly max_frames frames.
  take("min_new_tokens", s.min_new_tokens);
  if (s.min_new_tokens < 0)
    throw std::runtime_error(model_dir + "/generation_config.json: min_new_tokens is " +
                             std::to_string(s.min_new_tokens) + "; give a count >= 0 or delete the field");
  // The reference's logits processors refuse these values at generate(); without the check a temperature of
  // 0 divides every logit by zero and the draw picks from NaNs.
  const auto refuse = [&](const char* key, const std::string& value, const char* rule) {
    throw std::runtime_error(model_dir + "/generation_config.json: " + key + " is " + value + "; " + rule +
                             " (the reference's generate() refuses it too); fix the field or delete it for the default");
  };
  const auto check = [&](const sampling_settings& k, const char* temperature, const char* top_k, const char* top_p) {
    if (!k.do_sample) return;
    if (!(k.temperature > 0.0f)) refuse(temperature, std::to_string(k.temperature), "sampling needs a temperature > 0");
    if (k.top_k < 0) refuse(top_k, std::to_string(k.top_k), "top-k needs a count >= 1 (0: off)");
    if (!(k.top_p > 0.0f)) refuse(top_p, std::to_string(k.top_p), "top-p needs a probability in (0, 1]");
  };
  check(s.talker, "temperature", "top_k", "top_p");
  check(s.sub, "subtalker_temperature", "subtalker_top_k", "subtalker_top_p");
  if (!(s.repetition_penalty > 0.0f))
    refuse("repetition_penalty", std::to_string(s.repetition_penalty), "the penalty divides logits: give a value > 0");
  return s;
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

// The keys of a name -> id map (std::map: sorted) as "a, b, c", after `first` when given.
std::string names_of(const std::map<std::string, int>& ids, std::string first = "") {
  for (const auto& [name, id] : ids)
    first += (first.empty() ? "" : ", ") + name;
  return first;
}

} // namespace

std::optional<request_refusal> check_voice(const talker_config& c, std::string_view speaker, bool has_instruction,
                                           const request_words& w) {
  const std::string field(w.speaker);
  if (c.tts_model_type == "voice_design") {
    if (!speaker.empty())
      return request_refusal{field, "this is a VoiceDesign checkpoint, which has no voices: leave " + field +
                                        " out and describe the voice in " + std::string(w.instruction)};
    if (!has_instruction)
      return request_refusal{std::string(w.instruction), std::string(w.instruction) +
                                                             " is required: this is a VoiceDesign checkpoint, which "
                                                             "designs the voice from a description (\"A warm, slow "
                                                             "voice.\")"};
  } else if (c.tts_model_type == "custom_voice") {
    if (speaker.empty())
      return request_refusal{
          field, field + " is required: this is a CustomVoice checkpoint; its voices: " + names_of(c.spk_id)};
    if (!c.spk_id.count(lower(speaker)))
      return request_refusal{field, field + " \"" + std::string(speaker) +
                                        "\" is not one of this checkpoint's voices: " + names_of(c.spk_id)};
  }
  return std::nullopt;
}

std::optional<request_refusal> check_language(const talker_config& c, std::string_view language,
                                              const request_words& w) {
  const std::string l = lower(language);
  if (l == "auto" || c.codec_language_id.count(l)) return std::nullopt;
  return request_refusal{std::string(w.language),
                         std::string(w.language) + " \"" + std::string(language) +
                             "\" is not one of this checkpoint's languages: " + names_of(c.codec_language_id, "auto")};
}

std::optional<request_refusal> check_voice_and_language(const talker_config& c, std::string_view speaker,
                                                        bool has_instruction, std::string_view language,
                                                        const request_words& w) {
  if (auto refusal = check_voice(c, speaker, has_instruction, w)) return refusal;
  return check_language(c, language, w);
}

talker_prompt make_prompt(const std::string& model_dir, const talker_config& c, const request_parts& parts,
                          std::string* note) {
  if (c.tts_model_type == "base")
    throw std::invalid_argument(model_dir + " is a Base (voice cloning) model, which needs reference audio; only "
                                            "CustomVoice and VoiceDesign models are supported");
  if (parts.text_ids.empty()) throw std::invalid_argument("the text is empty; give at least one token");
  if (parts.speaker.empty() && parts.instruct_ids.empty())
    throw std::invalid_argument("give a speaker (CustomVoice) or an instruction (VoiceDesign)");
  talker_prompt p;
  p.speaker = parts.speaker;
  p.language = parts.language;
  p.non_streaming = !parts.streaming;
  // The wrapper drops a CustomVoice instruction when tts_model_size is a substring of "0b6" (the 0.6B models).
  const bool drop_instruct =
      !parts.speaker.empty() && std::string("0b6").find(c.tts_model_size) != std::string::npos;
  if (!parts.instruct_ids.empty() && drop_instruct && note)
    *note = "this is a 0.6B CustomVoice model (tts_model_size \"" + c.tts_model_size +
            "\"); the reference ignores the instruction, and so does this run";
  if (parts.templated) {
    p.input_ids = parts.text_ids;
    if (!drop_instruct) p.instruct_ids = parts.instruct_ids;
    return p;
  }
  // "<|im_start|>assistant\n" TEXT "<|im_end|>\n<|im_start|>assistant\n".
  const chat_ids chat = read_chat_ids(model_dir, c);
  p.input_ids = chat.assistant;
  p.input_ids.insert(p.input_ids.end(), parts.text_ids.begin(), parts.text_ids.end());
  p.input_ids.insert(p.input_ids.end(), chat.end.begin(), chat.end.end());
  p.input_ids.insert(p.input_ids.end(), chat.assistant.begin(), chat.assistant.end());
  if (!parts.instruct_ids.empty() && !drop_instruct) {
    p.instruct_ids = chat.user; // "<|im_start|>user\n" INSTRUCTION "<|im_end|>\n"
    p.instruct_ids.insert(p.instruct_ids.end(), parts.instruct_ids.begin(), parts.instruct_ids.end());
    p.instruct_ids.insert(p.instruct_ids.end(), chat.end.begin(), chat.end.end());
  }
  return p;
}

} // namespace qwen3_tts
