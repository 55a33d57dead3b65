// The Talker's and code predictor's configuration, typed, as the reference (qwen-tts 0.1.1) reads it from a
// checkpoint's config.json: shapes, special token ids, speakers and languages, RoPE settings. Fields the
// weights' shapes depend on are required; fields the reference gives a class default keep that default.
// Settings the host forward does not compute (sliding-window attention, biased attention, scaled RoPE, an
// activation other than SiLU) are refused with the field's name, instead of computing something else.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qwen3_tts {

// One decoder stack's shape (the Talker's or the code predictor's).
struct stack_config {
  int hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float rms_eps = 1e-6f;
  double rope_theta = 10000.0;
  int vocab = 0; // codec vocabulary (Talker: codec head rows; predictor: each lm head's rows)
};

struct talker_config {
  stack_config talker;
  stack_config predictor;
  int text_vocab = 0, text_hidden = 0;
  int code_groups = 16;
  // The Talker's multimodal RoPE as configured. A TTS token's three position streams (temporal, height, width)
  // are equal, so which stream drives which frequency (sections, interleaved or in blocks) changes nothing:
  // the forward rotates every frequency by the token's one position. The parity fixtures hold it to that.
  std::vector<int> mrope_section;
  bool mrope_interleaved = false;

  // Codec control ids (Talker vocabulary).
  int codec_eos = 0, codec_think = 0, codec_nothink = 0, codec_think_bos = 0, codec_think_eos = 0, codec_pad = 0,
      codec_bos = 0;
  // Text ids (text vocabulary).
  int tts_pad = 0, tts_bos = 0, tts_eos = 0, im_start = 0, im_end = 0;

  std::map<std::string, int> spk_id;                             // lower-case name -> codec id
  std::map<std::string, std::optional<std::string>> spk_dialect; // name -> dialect language (nullopt: none)
  std::map<std::string, int> codec_language_id;                  // lower-case language -> codec id
  std::string tts_model_size, tts_model_type;

  // Ids the Talker may never sample (the last 1024 of its vocabulary except the end token).
  bool suppressed(int id) const { return id >= talker.vocab - 1024 && id != codec_eos; }
};

// Parses the top-level config.json (with its talker_config and code_predictor_config). `where` names
// the file in messages. Throws std::runtime_error naming the field and what was wrong.
talker_config parse_talker_config(const nlohmann::json& config, const std::string& where = "config.json");

} // namespace qwen3_tts
