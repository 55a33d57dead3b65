// Parsing config.json into talker_config: every read names its field path in the message it throws.
#include "talker_config.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace qwen3_tts {
namespace {

using json = nlohmann::json;

struct reader {
  const json& obj;
  std::string path; // "config.json: talker_config.code_predictor_config"

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    // The top level's path ends in ':' ("config.json:"), nested ones in a field name.
    throw std::runtime_error(path + (path.back() == ':' ? " " : ".") + field + ": " + what);
  }
  const json* find(const std::string& field) const {
    auto it = obj.find(field);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  const json& need(const std::string& field) const {
    if (const json* v = find(field)) return *v;
    fail(field, "missing; an official Qwen3-TTS config.json has it (re-export the checkpoint or add the field)");
  }
  int integer(const json& v, const std::string& field) const {
    if (!v.is_number_integer()) fail(field, "expected an integer, found " + v.dump());
    // A 32-bit conversion would wrap 2^32 + 32 into 32, a value that passes every later check.
    const bool fits = v.is_number_unsigned() ? v.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<int>::max())
                                             : v.get<std::int64_t>() >= std::numeric_limits<int>::min() &&
                                                   v.get<std::int64_t>() <= std::numeric_limits<int>::max();
    if (!fits) fail(field, "found " + v.dump() + ", beyond a 32-bit integer (no Qwen3-TTS size or id is that large)");
    return v.get<int>();
  }
  int req_int(const std::string& field, int min = 1) const {
    const int v = integer(need(field), field);
    if (v < min) fail(field, "expected at least " + std::to_string(min) + ", found " + std::to_string(v));
    return v;
  }
  int opt_int(const std::string& field, int fallback) const {
    const json* v = find(field);
    return v ? integer(*v, field) : fallback;
  }
  // A token id with the reference's default, checked against the vocabulary it indexes.
  int opt_id(const std::string& field, int fallback, int vocab, const char* which) const {
    const int id = opt_int(field, fallback);
    if (id < 0 || id >= vocab)
      fail(field, std::to_string(id) + " is outside the " + which + " vocabulary [0, " + std::to_string(vocab) + ")");
    return id;
  }
  double opt_num(const std::string& field, double fallback) const {
    const json* v = find(field);
    if (!v) return fallback;
    if (!v->is_number()) fail(field, "expected a number, found " + v->dump());
    return v->get<double>();
  }
  bool opt_bool(const std::string& field, bool fallback) const {
    const json* v = find(field);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(field, "expected true or false, found " + v->dump());
    return v->get<bool>();
  }
  std::string opt_str(const std::string& field, std::string fallback) const {
    const json* v = find(field);
    if (!v) return fallback;
    if (!v->is_string()) fail(field, "expected a string, found " + v->dump());
    return v->get<std::string>();
  }
  reader sub(const std::string& field) const {
    const json& v = need(field);
    if (!v.is_object()) fail(field, "expected an object, found " + v.dump());
    return reader{v, path + (path.back() == ':' ? " " : ".") + field};
  }
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// The parts both stacks share (Qwen3TTSTalkerConfig and Qwen3TTSTalkerCodePredictorConfig read the same names).
stack_config read_stack(const reader& r, int default_vocab) {
  stack_config s;
  s.hidden = r.req_int("hidden_size");
  s.intermediate = r.req_int("intermediate_size");
  s.layers = r.req_int("num_hidden_layers");
  s.heads = r.req_int("num_attention_heads");
  s.kv_heads = r.req_int("num_key_value_heads");
  if (s.heads % s.kv_heads != 0)
    r.fail("num_key_value_heads", std::to_string(s.kv_heads) + " does not divide num_attention_heads " +
                                      std::to_string(s.heads) + " (grouped-query attention needs whole groups)");
  // The reference's attention takes head_dim from the config when present, else hidden / heads.
  s.head_dim = r.opt_int("head_dim", s.hidden / s.heads);
  if (s.head_dim <= 0 || s.head_dim % 2 != 0)
    r.fail("head_dim", "expected a positive even size (RoPE rotates halves), found " + std::to_string(s.head_dim));
  s.rms_eps = float(r.opt_num("rms_norm_eps", 1e-6));
  s.rope_theta = r.opt_num("rope_theta", 10000.0);
  s.vocab = r.opt_int("vocab_size", default_vocab);
  if (r.opt_str("hidden_act", "silu") != "silu")
    r.fail("hidden_act", "only \"silu\" is computed (the released checkpoints use it), found \"" +
                             r.opt_str("hidden_act", "") + "\"");
  if (r.opt_bool("attention_bias", false))
    r.fail("attention_bias", "true is not computed by this port (the released checkpoints have false)");
  if (r.opt_bool("use_sliding_window", false))
    r.fail("use_sliding_window", "true is not computed by this port (the released checkpoints have false)");
  return s;
}

void check_rope_type(const reader& r) {
  const json* rs = r.find("rope_scaling");
  if (!rs) return;
  if (!rs->is_object()) r.fail("rope_scaling", "expected an object or null, found " + rs->dump());
  const reader sr{*rs, r.path + ".rope_scaling"};
  std::string type = sr.opt_str("rope_type", sr.opt_str("type", "default"));
  if (type != "default")
    sr.fail("rope_type", "only \"default\" RoPE is computed (the released checkpoints use it), found \"" + type + "\"");
}

} // namespace

talker_config parse_talker_config(const json& config, const std::string& where) {
  if (!config.is_object()) throw std::runtime_error(where + ": expected a JSON object at the top level");
  // Messages read "config.json: talker_config.hidden_size: ...".
  const reader top_named{config, where + ":"};

  talker_config c;
  const reader tr = top_named.sub("talker_config");
  const reader pr = tr.sub("code_predictor_config");

  c.talker = read_stack(tr, 3072);
  c.predictor = read_stack(pr, 2048);
  check_rope_type(tr);
  check_rope_type(pr);
  c.text_vocab = tr.req_int("text_vocab_size");
  c.text_hidden = tr.req_int("text_hidden_size");
  c.code_groups = tr.req_int("num_code_groups", 2);
  if (pr.req_int("num_code_groups", 2) != c.code_groups)
    pr.fail("num_code_groups", "differs from talker_config.num_code_groups (" + std::to_string(c.code_groups) + ")");
  if (c.talker.vocab < 1024)
    tr.fail("vocab_size",
            "expected at least 1024 (the last 1024 ids are control tokens), found " + std::to_string(c.talker.vocab));

  // The Talker's RoPE is the multimodal one: rope_scaling carries the sections and the interleave flag.
  const reader rs = tr.sub("rope_scaling");
  const json& sec = rs.need("mrope_section");
  if (!sec.is_array() || sec.size() != 3)
    rs.fail("mrope_section", "expected three section sizes (temporal, height, width), found " + sec.dump());
  int sum = 0;
  for (const json& v : sec) {
    c.mrope_section.push_back(rs.integer(v, "mrope_section"));
    sum += c.mrope_section.back();
  }
  if (sum != c.talker.head_dim / 2)
    rs.fail("mrope_section", "sums to " + std::to_string(sum) + " but talker_config.head_dim / 2 is " +
                                 std::to_string(c.talker.head_dim / 2) + " (one section entry per rotary frequency)");
  c.mrope_interleaved = rs.opt_bool("interleaved", false);

  const int cv = c.talker.vocab, tv = c.text_vocab;
  c.codec_eos = tr.opt_id("codec_eos_token_id", 4198, cv, "codec");
  c.codec_think = tr.opt_id("codec_think_id", 4202, cv, "codec");
  c.codec_nothink = tr.opt_id("codec_nothink_id", 4203, cv, "codec");
  c.codec_think_bos = tr.opt_id("codec_think_bos_id", 4204, cv, "codec");
  c.codec_think_eos = tr.opt_id("codec_think_eos_id", 4205, cv, "codec");
  c.codec_pad = tr.opt_id("codec_pad_id", 4196, cv, "codec");
  c.codec_bos = tr.opt_id("codec_bos_id", 4197, cv, "codec");
  c.tts_pad = top_named.opt_id("tts_pad_token_id", 151671, tv, "text");
  c.tts_bos = top_named.opt_id("tts_bos_token_id", 151672, tv, "text");
  c.tts_eos = top_named.opt_id("tts_eos_token_id", 151673, tv, "text");
  c.im_start = top_named.opt_int("im_start_token_id", 151644);
  c.im_end = top_named.opt_int("im_end_token_id", 151645);
  c.tts_model_size = top_named.opt_str("tts_model_size", "");
  c.tts_model_type = top_named.opt_str("tts_model_type", "");

  auto codec_id = [&](const reader& r, const json& v, const std::string& field) {
    // A speaker id is written as an integer (or, in some exports, a one-element list).
    const json& x = v.is_array() && v.size() == 1 ? v[0] : v;
    const int id = r.integer(x, field);
    if (id < 0 || id >= c.talker.vocab)
      r.fail(field,
             std::to_string(id) + " is outside the codec vocabulary [0, " + std::to_string(c.talker.vocab) + ")");
    return id;
  };
  if (const json* spk = tr.find("spk_id")) {
    if (!spk->is_object()) tr.fail("spk_id", "expected an object of speaker name -> codec id");
    for (auto& [name, v] : spk->items())
      c.spk_id[lower(name)] = codec_id(tr, v, "spk_id." + name);
  }
  if (const json* dia = tr.find("spk_is_dialect")) {
    if (!dia->is_object()) tr.fail("spk_is_dialect", "expected an object of speaker name -> false or a dialect name");
    for (auto& [name, v] : dia->items()) {
      if (v.is_boolean() && !v.get<bool>())
        c.spk_dialect[lower(name)] = std::nullopt;
      else if (v.is_string())
        c.spk_dialect[lower(name)] = v.get<std::string>();
      else
        tr.fail("spk_is_dialect." + name, "expected false or a dialect name, found " + v.dump());
    }
  }
  if (const json* lang = tr.find("codec_language_id")) {
    if (!lang->is_object()) tr.fail("codec_language_id", "expected an object of language -> codec id");
    for (auto& [name, v] : lang->items())
      c.codec_language_id[lower(name)] = codec_id(tr, v, "codec_language_id." + name);
  }
  for (auto& [name, dialect] : c.spk_dialect)
    if (dialect && !c.codec_language_id.count(*dialect))
      tr.fail("spk_is_dialect." + name, "names dialect \"" + *dialect + "\", which codec_language_id lacks");
  return c;
}

} // namespace qwen3_tts
