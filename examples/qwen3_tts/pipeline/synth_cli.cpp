#include "synth_cli.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "codec_checkpoint.hpp"
#include "speech_model.hpp"
#include "speech_service.hpp"
#include "speech_run.hpp"
#include "talker_checkpoint.hpp"
#include "talker_request.hpp"
#include "wav.hpp"
#ifdef QWEN3TTS_CUDA
#include "qwen3_tts/checkpoint/checkpoint.hpp"
#include "speech_forwards_cuda.hpp"
#include "speech_service_cuda.hpp"
#endif
#ifdef QWEN3TTS_TEXT
#include "text_request.hpp"
#endif

namespace qwen3_tts::pipeline {
namespace {

#ifdef QWEN3TTS_CUDA
// Every speech_service of this program (`qwen3tts serve`'s) may run the CUDA Talker: this unit is always linked
// into qwen3tts (main calls synth_main), so its static initialisation registers the CUDA runtime before main.
[[maybe_unused]] const bool cuda_service_registered = (register_cuda_service<host_speech>(), true);
#endif

// The widest window sizes every codec output buffer (rows x width x samples per frame, 16 buffers).
constexpr std::uint32_t widest_window = 1024; // 82 s of audio at 12.5 frames a second

std::vector<std::uint32_t> parse_ramp(const std::string& text) {
  std::vector<std::uint32_t> out;
  for (auto id : parse_ids(text, "--window")) {
    if (id == 0) throw std::invalid_argument("--window: a width of 0 frames; give widths >= 1 (\"1,2,4,8\")");
    if (std::uint32_t(id) > widest_window)
      throw std::invalid_argument("--window: a width of " + std::to_string(id) + " frames; the widest window sizes "
                                  "every output buffer, so give widths of at most " + std::to_string(widest_window) +
                                  " frames");
    out.push_back(std::uint32_t(id));
  }
  return out;
}

// Refuses an --out that cannot be written before any work is done (the file itself is written at the end,
// so an existing one is left alone until the audio is there).
void check_writable(const std::string& out) {
  namespace fs = std::filesystem;
  const fs::path p(out);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw std::invalid_argument("--out: " + dir.string() + " is not a folder; create it or write elsewhere");
  if (fs::is_directory(p, ec)) throw std::invalid_argument("--out: " + out + " is a folder; give a file name");
  if (access(dir.c_str(), W_OK) != 0 || (fs::exists(p, ec) && access(p.c_str(), W_OK) != 0))
    throw std::invalid_argument("--out: " + out + " cannot be written (permissions)");
}

mstar::lane_mode parse_lane(const std::string& s) {
  if (s == "off") return mstar::lane_mode::off;
  if (s == "on") return mstar::lane_mode::on;
  if (s == "auto") return mstar::lane_mode::automatic;
  throw std::invalid_argument("--lane: \"" + s + "\" is not off, on or auto");
}

// --device: where the Talker runs. auto: the CUDA Talker when this build has it and a CUDA device is present,
// the host backend otherwise.
bool use_cuda(const std::string& device) {
  if (device != "host" && device != "cuda" && device != "auto")
    throw std::invalid_argument("--device: \"" + device + "\" is not host, cuda or auto");
#ifdef QWEN3TTS_CUDA
  if (device == "host") return false;
  const bool present = cuda_device_present();
  if (device == "cuda" && !present)
    throw std::invalid_argument("--device cuda: no CUDA device is usable here; use --device host (or auto)");
  return present;
#else
  if (device == "cuda")
    throw std::invalid_argument("--device cuda: this build has no CUDA Talker (it was configured without CUDA: "
                                "-Dgpu=disabled, or no nvcc); use --device host (or auto), or rebuild with CUDA");
  return false;
#endif
}

} // namespace

int synth_main(int argc, char** argv) {
  CLI::App app{"qwen3tts synth: speak a text with a Qwen3-TTS 12 Hz checkpoint (CustomVoice or VoiceDesign) through "
               "mstar's worker, and write a 24 kHz WAV. Nothing is downloaded: --model is a local folder",
               "qwen3tts synth"};
  std::string model_dir, text, text_ids, speaker, instruct, language = "auto", dump, out, window = "1,2,4,8",
                                                                         lane = "on", device = "auto",
                                                                         codec_math = "cublas";
  bool greedy = false, streaming = false, as_float = false;
  std::uint64_t seed = 0;
  std::uint32_t max_frames = 0;
  app.add_option("--model", model_dir, "checkpoint folder in the official layout (config.json, *.safetensors, "
                                       "speech_tokenizer/)")
      ->required();
  auto* text_opt = app.add_option("--text", text, "the text to speak (tokenized with the checkpoint's vocab.json and "
                                                 "merges.txt, as the reference does)");
  auto* ids_opt = app.add_option("--text-ids", text_ids, "instead of --text: the text's token ids, comma-separated "
                                                         "(the chat template is added)");
  text_opt->excludes(ids_opt);
  app.add_option("--speaker", speaker, "CustomVoice speaker name (config.json talker_config.spk_id); required there");
  app.add_option("--instruct", instruct,
                 "VoiceDesign instruction (required there): text with --text, comma-separated ids with --text-ids");
  app.add_option("--language", language, "auto or a language of talker_config.codec_language_id");
  app.add_flag("--greedy", greedy, "argmax decisions (the reference's logits processing still applies)");
  app.add_flag("--streaming", streaming,
               "one text token a decode step (model.generate's layout) instead of all the text in the prompt (the "
               "wrapper's default)");
  app.add_option("--seed", seed, "sampling seed (mixed with the request's id)");
  app.add_option("--max-frames", max_frames, "frames at most, 12.5 a second (default: generation_config.json "
                                             "max_new_tokens - 1, else 4095)");
  app.add_option("--dump-codes", dump, "also write the frames as {\"frames\": [[16 ints], ...]} here");
  app.add_option("--out", out, "the WAV file to write")->required();
  app.add_flag("--float", as_float, "32-bit float samples (the decoder's bits) instead of 16-bit PCM");
  app.add_option("--window", window, "the codec's window widths in frames, the last repeating");
  app.add_option("--lane", lane, "the codec's side lane: off, on or auto");
  app.add_option("--device", device, "where the model runs: host, cuda (the CUDA Talker and codec) or auto (the "
                                     "default: cuda when this build has it and a CUDA device is present, unless the "
                                     "checkpoint samples with top_p < 1; host otherwise)");
  app.add_option("--codec-math", codec_math,
                 "the CUDA codec's sums: cublas (cuBLAS float32, the default: faster), "
                 "tf32 (cuBLAS on the tensor cores, bf16-level precision), fp16 (cuBLAS over fp16 operands: "
                 "TF32's precision in half the bytes, fp16's range), double "
                 "(double sums: a request's audio independent of its batch), tf32-conv (tf32 with CUTLASS's "
                 "implicit-GEMM convolutions), fp16-conv (fp16 with CUTLASS's fp16 convolutions; the -conv maths in "
                 "builds with CUTLASS only) or auto (tf32-conv where the build has CUTLASS, else tf32)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11's own codes (106 for a missing option, ...) would read as crashes to a script; --help is 0.
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    if (text.empty() && text_ids.empty()) throw std::invalid_argument("give the text: --text \"...\" (or --text-ids)");
    check_writable(out);
    if (!dump.empty()) check_writable(dump);
    if (std::find(codec_math_names.begin(), codec_math_names.end(), codec_math) == codec_math_names.end()) {
      std::string names;
      for (const auto& n : codec_math_names)
        names += (names.empty() ? "" : ", ") + n;
      throw std::invalid_argument("--codec-math: \"" + codec_math + "\" is not one of " + names);
    }
    bool cuda = use_cuda(device);
    // The voice and the language against config.json before any weight is read; a mismatch is the command
    // line's, so it exits 2 as one that does not parse.
    if (const auto refusal = check_voice_and_language(read_talker_config(model_dir), speaker, !instruct.empty(),
                                                      language, synth_options)) {
      std::cerr << "qwen3tts synth: " << refusal->message << "\n";
      return 2;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const talker_host talker = load_talker(model_dir);
    const codec_decoder codec = load_codec_decoder(model_dir);
    request_parts parts;
    if (!text.empty()) {
#ifdef QWEN3TTS_TEXT
      parts = templated_parts(text_tokenizer::from_folder(model_dir), text, instruct);
#else
      throw std::invalid_argument("--text needs the text tokenizer, which this build left out (utf8proc was not "
                                  "found: install libutf8proc-dev and reconfigure); or pass --text-ids");
#endif
    } else {
      parts.text_ids = parse_ids(text_ids, "--text-ids");
      if (!instruct.empty()) parts.instruct_ids = parse_ids(instruct, "--instruct");
    }
    parts.speaker = speaker;
    parts.language = language;
    parts.streaming = streaming;
    std::string note;
    speech_request req;
    req.prompt = make_prompt(model_dir, talker.config(), parts, &note);
    if (!note.empty()) std::cerr << "qwen3tts synth: " << note << "\n";

    speech_run_options o;
    // As the wrapper's do_sample=False: only the decisions change; the penalty and the frame limit stay the
    // checkpoint's generation_config.json values.
    o.sampling = sampling_from(model_dir);
    if (greedy) o.sampling.talker.do_sample = o.sampling.sub.do_sample = false;
    req.max_frames = max_frames ? max_frames : std::uint32_t(o.sampling.max_frames);
    o.seed = seed;
    o.lane = parse_lane(lane);
    o.flow.ramp = parse_ramp(window);
    o.flow.keep_audio = true;
    o.max_batch = 4;
    // The CUDA sampler computes no top_p < 1: auto falls back to the host, cuda refuses (set_sampling says why).
    const auto top_p_sampled = [](const sampling_settings& s) { return s.do_sample && s.top_p < 1.0f; };
    if (cuda && device == "auto" && (top_p_sampled(o.sampling.talker) || top_p_sampled(o.sampling.sub))) {
      std::cerr << "qwen3tts synth: the checkpoint samples with top_p < 1, which the CUDA Talker does not compute "
                   "yet: running on the host (--greedy runs on CUDA)\n";
      cuda = false;
    }
    std::chrono::steady_clock::time_point t1;
    speech_run_result run;
#ifdef QWEN3TTS_CUDA
    std::unique_ptr<talker_cuda> gpu;
    if (cuda) {
      gpu = std::make_unique<talker_cuda>(cuda_dims(talker.config()), speech_talker_limits<host_speech>(o.max_batch));
      const checkpoint_folder checkpoint = open_checkpoint(model_dir);
      gpu->load_weights(store_weight_source(checkpoint.weights));
      t1 = std::chrono::steady_clock::now();
      run = run_speech_cuda<host_speech>(talker, *gpu, codec, {req}, o, codec_math_named(codec_math));
    }
#endif
    if (!cuda) {
      t1 = std::chrono::steady_clock::now();
      run = run_speech<host_speech>(talker, codec, {req}, o);
    }
    const auto t2 = std::chrono::steady_clock::now();
    const speech_result& r = run.results.at(1);
    if (r.how != mstar::request_end::completed)
      throw std::runtime_error("the request did not complete: " + (r.why.empty() ? std::string("no reason") : r.why));
    write_wav(out, r.audio, codec.config().output_sample_rate, as_float ? wav_format::float32 : wav_format::pcm16);
    if (!dump.empty()) {
      nlohmann::json j;
      auto& frames = j["frames"] = nlohmann::json::array();
      const std::size_t g = std::size_t(talker.config().code_groups);
      for (std::size_t f = 0; f * g < r.codes.size(); ++f)
        frames.push_back(std::vector<std::int32_t>(r.codes.begin() + f * g, r.codes.begin() + (f + 1) * g));
      std::ofstream file(dump);
      if (!(file << j.dump() << "\n")) throw std::runtime_error("--dump-codes: cannot write " + dump);
    }
    const double load_s = std::chrono::duration<double>(t1 - t0).count();
    const double run_s = std::chrono::duration<double>(t2 - t1).count();
    const double audio_s = double(r.audio.size()) / codec.config().output_sample_rate;
    std::fprintf(stderr,
                 "qwen3tts synth: %u frames (%s), %zu samples (%.3g s of audio at %d Hz) in %zu chunks -> %s; load "
                 "%.2f s, synthesis %.2f s (%s, %llu prefill / %llu decode / %llu codec steps)\n",
                 r.frames, r.ended_by_token ? "end token" : "frame limit", r.audio.size(), audio_s,
                 codec.config().output_sample_rate, std::size_t(r.chunks), out.c_str(), load_s, run_s,
                 cuda ? "CUDA Talker, CUDA codec" : "host backend", (unsigned long long)run.prefill_steps,
                 (unsigned long long)run.decode_steps, (unsigned long long)run.codec_steps);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "qwen3tts synth: " << e.what() << "\n";
    return 1;
  }
}

} // namespace qwen3_tts::pipeline
