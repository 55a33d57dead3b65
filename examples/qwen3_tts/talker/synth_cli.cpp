// qwen3tts synth: a checkpoint folder and a prompt in, the Talker's frames out as JSON ({"frames": [[16 ints], ...]}).
// It follows the reference wrapper's generate_custom_voice / generate_voice_design: the prompt is chat-templated,
// all the text goes into the prompt unless --streaming, sampling defaults come from generation_config.json, and a
// 0.6B CustomVoice model ignores an instruction. The text tokenizer is not ported yet, so text comes as ids.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "talker.hpp"
#include "talker_checkpoint.hpp"

namespace qwen3_tts {
namespace {

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
    if (used == 0 || v < 0)
      throw std::invalid_argument(std::string(option) + ": \"" + item + "\" is not a token id (give ids as \"1,2,3\")");
    ids.push_back(std::int32_t(v));
  }
  if (ids.empty()) throw std::invalid_argument(std::string(option) + ": no ids given");
  return ids;
}

// The reference wrapper's defaults, overridden by the checkpoint's generation_config.json where it has a value.
talker_sampling sampling_from(const std::string& model_dir) {
  talker_sampling s;
  std::ifstream f(model_dir + "/generation_config.json");
  if (!f) return s;
  const nlohmann::json g = nlohmann::json::parse(f, nullptr, false);
  if (!g.is_object()) throw std::runtime_error(model_dir + "/generation_config.json: not a JSON object");
  auto take = [&](const char* key, auto& field) {
    if (auto it = g.find(key); it != g.end() && !it->is_null()) field = it->get<std::decay_t<decltype(field)>>();
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
  return s;
}

} // namespace

int synth_codes_main(int argc, char** argv) {
  CLI::App app{"qwen3tts synth: run the Qwen3-TTS Talker on a checkpoint folder and write its codes as JSON"};
  std::string model_dir, text, text_ids, speaker, instruct, language = "auto", dump;
  bool greedy = false, streaming = false;
  std::uint64_t seed = 0;
  int max_frames = 0;
  app.add_option("--model", model_dir, "checkpoint folder in the official layout (config.json, *.safetensors)")
      ->required();
  auto* text_opt = app.add_option("--text", text, "text to speak (needs the text tokenizer: not ported yet)");
  auto* ids_opt = app.add_option("--text-ids", text_ids,
                                 "the text's token ids, comma-separated (without the chat template, which is added)");
  text_opt->excludes(ids_opt);
  app.add_option("--speaker", speaker, "CustomVoice speaker name (config.json talker_config.spk_id)");
  app.add_option("--instruct", instruct, "VoiceDesign instruction, as comma-separated token ids for now");
  app.add_option("--language", language, "auto or a language of talker_config.codec_language_id");
  app.add_flag("--greedy", greedy, "argmax decisions (the reference's logits processing still applies)");
  app.add_flag("--streaming", streaming,
               "one text token a decode step (model.generate's layout) instead of all "
               "the text in the prompt (the wrapper's default)");
  app.add_option("--seed", seed, "sampling seed of this request");
  app.add_option("--max-frames", max_frames,
                 "frames at most (default: generation_config.json max_new_tokens - 1, else 4095)");
  app.add_option("--dump-codes", dump, "write {\"frames\": [[16 ints], ...]} here (default: standard output)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (!text.empty())
      throw std::invalid_argument("--text needs the text tokenizer, which is not ported yet; tokenize the text with "
                                  "the reference and pass --text-ids");
    if (text_ids.empty()) throw std::invalid_argument("give the text as --text-ids \"1,2,3\"");
    if (speaker.empty() && instruct.empty())
      throw std::invalid_argument("give --speaker NAME (CustomVoice) or --instruct IDS (VoiceDesign)");

    const talker_host model = load_talker(model_dir);
    const talker_config& c = model.config();
    if (c.tts_model_type == "base")
      throw std::invalid_argument(model_dir + " is a Base (voice cloning) model, which needs reference audio; only "
                                              "CustomVoice and VoiceDesign are supported");
    talker_prompt p;
    p.speaker = speaker;
    p.language = language;
    p.non_streaming = !streaming;
    // The chat template, as ids: "<|im_start|>assistant\n" TEXT "<|im_end|>\n<|im_start|>assistant\n".
    const std::vector<std::int32_t> body = parse_ids(text_ids, "--text-ids");
    const chat_ids chat = read_chat_ids(model_dir, c);
    p.input_ids = chat.assistant;
    p.input_ids.insert(p.input_ids.end(), body.begin(), body.end());
    p.input_ids.insert(p.input_ids.end(), chat.end.begin(), chat.end.end());
    p.input_ids.insert(p.input_ids.end(), chat.assistant.begin(), chat.assistant.end());
    // The wrapper drops a CustomVoice instruction when tts_model_size is a substring of "0b6" (the 0.6B models).
    const bool drop_instruct = !speaker.empty() && std::string("0b6").find(c.tts_model_size) != std::string::npos;
    if (!instruct.empty() && !drop_instruct) {
      const std::vector<std::int32_t> ins = parse_ids(instruct, "--instruct");
      p.instruct_ids = chat.user;
      p.instruct_ids.insert(p.instruct_ids.end(), ins.begin(), ins.end());
      p.instruct_ids.insert(p.instruct_ids.end(), chat.end.begin(), chat.end.end());
    } else if (!instruct.empty()) {
      std::cerr << "qwen3tts synth: this is a 0.6B CustomVoice model (tts_model_size \"" << c.tts_model_size
                << "\"); the reference ignores the instruction, and so does this run\n";
    }

    talker_sampling s = greedy ? talker_sampling::greedy() : sampling_from(model_dir);
    if (greedy) s.max_frames = sampling_from(model_dir).max_frames;
    if (max_frames > 0) s.max_frames = max_frames;
    const generate_result r = generate(model, p, s, seed);

    nlohmann::json out;
    out["frames"] = r.frames;
    if (dump.empty()) {
      std::cout << out.dump() << "\n";
    } else {
      std::ofstream f(dump);
      if (!(f << out.dump() << "\n")) throw std::runtime_error("--dump-codes: cannot write " + dump);
    }
    std::cerr << "qwen3tts synth: " << r.frames.size() << " frames" << (r.stopped ? " (end token)" : " (frame limit)")
              << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "qwen3tts synth: " << e.what() << "\n";
    return 1;
  }
}

} // namespace qwen3_tts
