#include "serve.hpp"
#include "service_flags.hpp"

#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec_checkpoint.hpp"
#include "speech_model.hpp"
#include "speech_service.hpp"
#include "talker_checkpoint.hpp"
#include "talker_request.hpp"
#include "text_request.hpp"
#include "tokenizer.hpp"
#include "wav.hpp"

namespace qwen3_tts::serve {
namespace {

// An IPv4 or IPv6 socket address's port, or -1.
int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

// The descriptor of the connection request q came on, or -1. cpp-httplib 0.11 tells a handler nothing of a client
// that went away before its answer is written, so a non-streaming request finds its connection among the
// process's sockets by both of its ends (the addresses formatted as cpp-httplib formats them) and polls it. The
// handler's thread holds the connection until the handler returns, so the descriptor is not reused meanwhile.
int connection_of(const httplib::Request& q) {
  auto end_of = [](const sockaddr_storage& a, socklen_t len, std::string& host) {
    char name[NI_MAXHOST];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, name, sizeof name, nullptr, 0, NI_NUMERICHOST) != 0)
      return -1;
    host = name;
    return port_of(a);
  };
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/fd", ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int fd = std::atoi(name.c_str());
    sockaddr_storage peer{}, local{};
    socklen_t peer_len = sizeof peer, local_len = sizeof local;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0)
      continue;
    std::string peer_host, local_host;
    if (end_of(peer, peer_len, peer_host) == q.remote_port && end_of(local, local_len, local_host) == q.local_port &&
        peer_host == q.remote_addr && local_host == q.local_addr)
      return fd;
  }
  return -1;
}

// Whether the client of connection fd hung up (or the connection failed): nothing it sent is read.
bool hung_up(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

using json = nlohmann::json;
using service = pipeline::speech_service<pipeline::host_speech>;

struct serve_options {
  std::string model_dir, host = "127.0.0.1";
  int port = 8000;
  std::size_t max_text = 4096;     // bytes of input, and of instructions
  std::uint32_t max_frames = 1200; // 96 s of audio
  std::uint32_t max_live = 16, max_queued = 128, max_batch = 16;
  std::size_t max_body = 64 * 1024;
  std::uint64_t seed = 0;
  std::string lane = "on", window = "1,2,4,8";
  std::string language = "auto"; // every request's: OpenAI's request has no language field
  // the fields of --device, add_cuda_flags and add_codec_wait_flags; service_options() starts from it
  pipeline::speech_service_options cuda;
  double codec_wait_ms = 0;
};

// A 4xx/5xx answer: OpenAI's error object.
struct http_error {
  int status;
  std::string message, type, param;
};

void send_error(httplib::Response& res, const http_error& e) {
  json j = {{"error", {{"message", e.message}, {"type", e.type}, {"param", nullptr}}}};
  if (!e.param.empty()) j["error"]["param"] = e.param;
  res.status = e.status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n", "application/json");
}

http_error bad(std::string param, std::string message) {
  return {400, std::move(message), "invalid_request_error", std::move(param)};
}

// Latency histograms in seconds (Prometheus cumulative buckets); updated on the worker's main thread,
// read by /metrics.
class histogram {
public:
  static constexpr std::array<double, 12> bounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  void add(double s) {
    std::lock_guard g(lock_);
    for (std::size_t i = 0; i < bounds.size(); ++i)
      if (s <= bounds[i]) ++counts_[i];
    ++count_;
    sum_ += s;
  }
  void write(std::ostream& o, const char* name, const char* help) const {
    std::lock_guard g(lock_);
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    for (std::size_t i = 0; i < bounds.size(); ++i)
      o << name << "_bucket{le=\"" << bounds[i] << "\"} " << counts_[i] << "\n";
    o << name << "_bucket{le=\"+Inf\"} " << count_ << "\n"
      << name << "_sum " << sum_ << "\n"
      << name << "_count " << count_ << "\n";
  }

private:
  mutable std::mutex lock_;
  std::array<std::uint64_t, bounds.size()> counts_{};
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

// One request's audio on its way from the worker's main thread (producer) to its HTTP thread (consumer).
struct audio_queue {
  std::mutex lock;
  std::condition_variable cv;
  std::vector<float> pending; // streaming: samples not sent yet; not streaming: every sample
  bool ended = false;
  mstar::request_end how = mstar::request_end::failed;
  std::string why;
};

// PCM16 little-endian bytes of samples, exactly as the WAV writer writes them (its file less its header).
std::string pcm16_bytes(std::span<const float> samples, int rate) {
  const auto file = encode_wav(samples, rate, wav_format::pcm16);
  const std::size_t data = samples.size() * 2;
  return std::string(reinterpret_cast<const char*>(file.data()) + (file.size() - data), data);
}

// A WAV header for a stream of unknown length: RIFF and data sizes 0xFFFFFFFF, the convention players and
// ffmpeg read as "until the end of the stream".
std::string streaming_wav_header(int rate) {
  const auto file = encode_wav({}, rate, wav_format::pcm16);
  std::string h(reinterpret_cast<const char*>(file.data()), file.size());
  const auto at = h.rfind("data");
  if (h.size() < 12 || at == std::string::npos || at + 8 != h.size())
    throw std::logic_error("qwen3tts serve: the WAV writer's header has no trailing data chunk");
  for (std::size_t off : {std::size_t(4), at + 4})
    h.replace(off, 4, "\xff\xff\xff\xff", 4);
  return h;
}

class server {
public:
  explicit server(serve_options o)
      : o_(std::move(o)), talker_(load_talker(o_.model_dir)), codec_(load_codec_decoder(o_.model_dir)),
        tok_(text_tokenizer::from_folder(o_.model_dir)), rate_(codec_.config().output_sample_rate),
        svc_(talker_, codec_, service_options()) {
    const auto& t = talker_.config().tts_model_type;
    voice_design_ = t == "voice_design";
    if (!voice_design_ && t != "custom_voice")
      throw std::invalid_argument(o_.model_dir + "/config.json: tts_model_type \"" + t +
                                  "\" is not served; give a CustomVoice or VoiceDesign checkpoint");
  }

  void install(httplib::Server& http) {
    // Every body is read through read_body, which keeps at most --max-body bytes of it (below): a handler with a
    // content reader for each method that has one, the speech route's first and a catch-all's last.
    http.Post("/v1/audio/speech",
              [this](const httplib::Request& q, httplib::Response& r, const httplib::ContentReader& read) {
                if (auto body = read_body(q, r, read)) speech(q, *body, r);
              });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
      auto voices = json::array(); // the values `voice` takes; a VoiceDesign checkpoint has none
      if (!voice_design_)
        for (const auto& [name, id] : talker_.config().spk_id)
          voices.push_back(name);
      json j = {{"status", stopping_ ? "stopping" : "ok"},
                {"model", o_.model_dir},
                {"tts_model_type", talker_.config().tts_model_type},
                {"tts_model_size", talker_.config().tts_model_size},
                {"voices", std::move(voices)},
                {"language", o_.language},
                {"sample_rate", rate_},
                {"lane", o_.lane},
                {"device", svc_.on_cuda() ? "cuda" : "host"}};
      if (stopping_) r.status = 503; // a load balancer sends no more requests here
      r.set_content(j.dump() + "\n", "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
      r.set_content(metrics(), "text/plain; version=0.0.4");
    });
    // Known routes under another method: 405 with the Allow header, and the rest 404, both as JSON (the error
    // handler). A body is read (bounded) first, so that a kept-alive connection stays in step.
    for (const auto& [path, allow] : {std::pair<std::string, std::string>{"/v1/audio/speech", "POST"},
                                      {"/health", "GET, HEAD"},
                                      {"/metrics", "GET, HEAD"}}) {
      auto not_allowed = [this, allow](const httplib::Request& q, httplib::Response& r) {
        ++rejected_;
        r.set_header("Allow", allow);
        send_error(
            r, {405, q.method + " is not allowed on " + q.path + "; allowed: " + allow, "invalid_request_error", ""});
      };
      auto with_body = [this, not_allowed](const httplib::Request& q, httplib::Response& r,
                                           const httplib::ContentReader& read) {
        if (read_body(q, r, read)) not_allowed(q, r);
      };
      if (path != "/v1/audio/speech")
        http.Post(path, with_body);
      else
        http.Get(path, not_allowed); // HEAD too
      http.Put(path, with_body);
      http.Delete(path, with_body);
      http.Patch(path, with_body);
      http.Options(path, not_allowed);
    }
    auto no_route = [this](const httplib::Request& q, httplib::Response& r, const httplib::ContentReader& read) {
      if (read_body(q, r, read)) r.status = 404; // the error handler answers
    };
    http.Post(".*", no_route);
    http.Put(".*", no_route);
    http.Delete(".*", no_route);
    http.Patch(".*", no_route);
    http.set_error_handler(
        httplib::Server::HandlerWithResponse([this](const httplib::Request& q, httplib::Response& r) {
          if (!r.body.empty()) return httplib::Server::HandlerResponse::Unhandled; // a handler's own error
          ++rejected_;
          if (r.status == 404)
            send_error(r, {404,
                           "no route " + q.method + " " + q.path +
                               " (POST /v1/audio/speech, GET /health, "
                               "GET /metrics)",
                           "invalid_request_error", ""});
          else if (r.status == 413)
            send_error(r, {413, "the request body is over " + std::to_string(o_.max_body) + " bytes",
                           "invalid_request_error", ""});
          else if (r.status == 400)
            send_error(r, {400,
                           "the request could not be read: a malformed request line or header, or a method other "
                           "than GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH",
                           "invalid_request_error", ""});
          else
            send_error(r, {r.status, "the request could not be read (HTTP " + std::to_string(r.status) + ")",
                           r.status >= 500 ? "server_error" : "invalid_request_error", ""});
          return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& r, std::exception_ptr e) {
      std::string what = "unknown exception";
      try {
        if (e) std::rethrow_exception(e);
      } catch (const std::exception& x) {
        what = x.what();
      } catch (...) {
      }
      send_error(r, {500, "internal error: " + what, "server_error", ""});
    });
    http.set_payload_max_length(o_.max_body);
  }

  // SIGINT/SIGTERM: new speech requests get 503 (and /health says "stopping") while those accepted run to their
  // end and their answers go out whole.
  void begin_stop() { stopping_ = true; }
  // Speech answers accepted and not yet sent whole (a stream's ends when its connection is done with it).
  std::uint32_t open_answers() const { return open_answers_.load(); }

private:
  // What a valid body asks for.
  struct ask {
    pipeline::speech_request req;
    bool stream = false, wav = true;
  };

  pipeline::speech_service_options service_options() const {
    pipeline::speech_service_options so = o_.cuda; // add_cuda_flags' fields, the rest set here
    so.sampling = sampling_from(o_.model_dir);
    so.max_live = o_.max_live;
    so.max_batch = o_.max_batch; // at most max_live (serve_main)
    so.ramp = window_ramp(o_.window);
    set_codec_wait(so, o_.codec_wait_ms);
    if (o_.lane == "off")
      so.lane = mstar::lane_mode::off;
    else if (o_.lane == "auto")
      so.lane = mstar::lane_mode::automatic;
    return so;
  }

  // The body of a request, or nothing when an error was answered: at most --max-body bytes, counted as the handler
  // sees them. cpp-httplib 0.11 bounds a Content-Length body only (set_payload_max_length: 413 and the body
  // skipped); a chunked body, and the inflated bytes of a gzip or br Content-Encoding, it would read into memory
  // whole, however far a gzip body inflates. Past the bound the rest is read and dropped, as cpp-httplib
  // skips a Content-Length body, so that a kept-alive connection stays in step.
  std::optional<std::string> read_body(const httplib::Request& q, httplib::Response& r,
                                       const httplib::ContentReader& read) {
    // RFC 9112 6.3: a request with neither Content-Length nor Transfer-Encoding has no body. cpp-httplib would
    // read one until the client closed, so a POST without a body waited out the read timeout (5 s) for a 400.
    if (!q.has_header("Content-Length") && !q.has_header("Transfer-Encoding")) return std::string();
    std::string body;
    bool over = false;
    const bool read_whole = read([&](const char* data, std::size_t n) {
      over = over || body.size() + n > o_.max_body;
      if (!over) body.append(data, n);
      return true;
    });
    if (over || r.status == 413) {
      ++rejected_;
      send_error(r, {413,
                     "the request body is over " + std::to_string(o_.max_body) +
                         " bytes (--max-body; counted after any Content-Encoding is undone)",
                     "invalid_request_error", ""});
      return std::nullopt;
    }
    if (!read_whole) {
      ++rejected_;
      send_error(r, {400,
                     "the request body could not be read: it ended before its Content-Length, its chunked encoding "
                     "or Content-Encoding is malformed, or the client sent nothing for 5 s",
                     "invalid_request_error", ""});
      return std::nullopt;
    }
    return body;
  }

  // Validates the body whole; nothing is submitted unless every field is right.
  std::variant<ask, http_error> parse(const std::string& body) const {
    json j;
    try {
      j = json::parse(body);
    } catch (const json::exception& e) {
      return bad("", std::string("the body is not JSON: ") + e.what());
    }
    if (!j.is_object()) return bad("", "the body must be a JSON object");
    static const std::array<std::string_view, 10> known = {
        "model",  "input",         "voice", "instructions", "response_format",
        "stream", "stream_format", "speed", "seed",         "max_frames"};
    for (const auto& [k, v] : j.items())
      if (std::find(known.begin(), known.end(), k) == known.end())
        return bad(k, "unknown field \"" + k +
                          "\" (known: model, input, voice, instructions, response_format, stream, stream_format, "
                          "speed, seed, max_frames)");
    // OpenAI's speed and stream_format, taken where they ask for what this server does anyway, so that clients
    // that always send them work: speed 1 (the model has no speed control), stream_format "audio" (raw audio bytes,
    // streamed as they are made; "sse", audio in server-sent events, is not served).
    if (j.contains("speed") && (!j["speed"].is_number() || j["speed"].get<double>() != 1.0))
      return bad("speed", "speed must be 1 (the model has no speed control); leave it out");
    if (j.contains("stream_format") && (!j["stream_format"].is_string() || j["stream_format"] != "audio"))
      return bad("stream_format", "stream_format must be \"audio\" (raw audio bytes, streamed; server-sent events "
                                  "are not served); or leave it out and give stream");
    if (!j.contains("model") || !j["model"].is_string()) return bad("model", "model is required and must be a string");
    if (!j.contains("input") || !j["input"].is_string()) return bad("input", "input is required and must be a string");
    const auto& input = j["input"].get_ref<const std::string&>();
    if (input.empty()) return bad("input", "input is empty; give the text to speak");
    if (input.size() > o_.max_text)
      return bad("input", "input is " + std::to_string(input.size()) + " bytes; at most " +
                              std::to_string(o_.max_text) + " (--max-text)");
    std::string instructions;
    if (j.contains("instructions")) {
      if (!j["instructions"].is_string()) return bad("instructions", "instructions must be a string");
      instructions = j["instructions"].get<std::string>();
      if (instructions.size() > o_.max_text)
        return bad("instructions", "instructions are " + std::to_string(instructions.size()) + " bytes; at most " +
                                       std::to_string(o_.max_text) + " (--max-text)");
    }
    std::string voice;
    if (j.contains("voice")) {
      if (!j["voice"].is_string()) return bad("voice", "voice must be a string");
      voice = j["voice"].get<std::string>();
      std::transform(voice.begin(), voice.end(), voice.begin(), [](unsigned char c) { return std::tolower(c); });
    }
    if (auto refusal = check_voice(talker_.config(), voice, !instructions.empty(), request_fields))
      return bad(refusal->field, refusal->message);
    ask a;
    if (j.contains("response_format")) {
      if (!j["response_format"].is_string()) return bad("response_format", "response_format must be a string");
      const auto f = j["response_format"].get<std::string>();
      if (f != "wav" && f != "pcm")
        return bad("response_format", "response_format \"" + f +
                                          "\" is not supported; give wav or pcm (16-bit "
                                          "little-endian mono at " +
                                          std::to_string(rate_) + " Hz)");
      a.wav = f == "wav";
    }
    a.stream = j.contains("stream_format"); // "audio": streamed, as OpenAI's answer is, unless stream says
    if (j.contains("stream")) {
      if (!j["stream"].is_boolean()) return bad("stream", "stream must be true or false");
      a.stream = j["stream"].get<bool>();
    }
    std::uint64_t seed = o_.seed;
    if (j.contains("seed")) {
      if (!j["seed"].is_number_unsigned()) return bad("seed", "seed must be an integer >= 0");
      seed = j["seed"].get<std::uint64_t>();
    }
    // The checkpoint's generation_config.json max_new_tokens bounds a request too, as it bounds synth's.
    a.req.max_frames = std::min(o_.max_frames, std::uint32_t(svc_.options().sampling.max_frames));
    if (j.contains("max_frames")) {
      const auto& m = j["max_frames"];
      if (!m.is_number_unsigned() || m.get<std::uint64_t>() == 0 || m.get<std::uint64_t>() > o_.max_frames)
        return bad("max_frames", "max_frames must be an integer in 1.." + std::to_string(o_.max_frames) +
                                     " (--max-frames; 12.5 frames a second)");
      a.req.max_frames = m.get<std::uint32_t>();
    }
    // Request id 1 under the engine seed `seed` is what `qwen3tts synth --seed` samples with: the same text
    // and seed give the same audio here, whatever id the service gives the request.
    a.req.seed = mstar::mix_seed(seed, 1);
    try {
      request_parts parts = pipeline::templated_parts(tok_, input, instructions);
      parts.speaker = voice;
      parts.language = o_.language;
      a.req.prompt = make_prompt(o_.model_dir, talker_.config(), parts);
    } catch (const std::invalid_argument& e) {
      return bad("input", e.what());
    }
    return a;
  }

  // Reserves a place for a request: false when max_live + max_queued are in flight.
  bool reserve() {
    auto n = in_flight_.load();
    do {
      if (n >= o_.max_live + o_.max_queued) return false;
    } while (!in_flight_.compare_exchange_weak(n, n + 1));
    return true;
  }

  // Submits; the queue sees every chunk and the end. Returns the id.
  mstar::request_id submit(ask& a, const std::shared_ptr<audio_queue>& q) {
    pipeline::speech_callbacks cb;
    cb.on_chunk = [this, q](std::span<const float> audio) {
      samples_.fetch_add(audio.size(), std::memory_order_relaxed);
      std::lock_guard g(q->lock);
      q->pending.insert(q->pending.end(), audio.begin(), audio.end());
      q->cv.notify_one();
    };
    cb.on_end = [this, q](const pipeline::speech_result& r) {
      if (r.first_audio >= 0) first_audio_.add(double(r.first_audio - r.submitted) / 1e9);
      for (auto g : r.gaps)
        gap_.add(double(g) / 1e9);
      in_flight_.fetch_sub(1);
      std::lock_guard g(q->lock);
      q->ended = true;
      q->how = r.how;
      q->why = r.why;
      q->cv.notify_one();
    };
    return svc_.submit(std::move(a.req), std::move(cb));
  }

  void speech(const httplib::Request& q, const std::string& body, httplib::Response& res) {
    // Counts this answer open until it is sent whole: the handler's return (not streaming; cpp-httplib sends the body
    // before a stop ends the connection) or the stream's connection letting its provider go. Counted before
    // stopping_ is read, so that a stop either refuses this request or waits for it.
    ++open_answers_;
    auto open = std::shared_ptr<void>(nullptr, [this](void*) { --open_answers_; });
    if (stopping_) {
      ++rejected_;
      send_error(res, {503, "the server is stopping (SIGINT or SIGTERM) and takes no new requests; send it to another",
                       "server_error", ""});
      return;
    }
    auto parsed = parse(body);
    if (auto* e = std::get_if<http_error>(&parsed)) {
      ++rejected_;
      send_error(res, *e);
      return;
    }
    auto& a = std::get<ask>(parsed);
    if (!reserve()) {
      ++rejected_;
      send_error(res, {429,
                       "the server is full: " + std::to_string(o_.max_live) + " live and " +
                           std::to_string(o_.max_queued) + " queued requests (--max-live, --max-queued); retry later",
                       "rate_limit_error", ""});
      return;
    }
    auto aq = std::make_shared<audio_queue>();
    const auto id = submit(a, aq);
    const char* type = a.wav ? "audio/wav" : "audio/pcm";
    if (!a.stream) {
      // Its client's hang-up, looked for while it waits, cancels it as a stream's does (where the connection is
      // not found, it runs to its end).
      const int fd = connection_of(q);
      std::unique_lock g(aq->lock);
      auto ended = [&] { return aq->ended; };
      while (fd >= 0 && !aq->cv.wait_for(g, std::chrono::milliseconds(50), ended))
        if (hung_up(fd)) {
          g.unlock();
          svc_.cancel(id);
          g.lock();
          break;
        }
      aq->cv.wait(g, ended);
      if (aq->how != mstar::request_end::completed) {
        send_error(res, {500, "the request did not complete: " + (aq->why.empty() ? std::string("no reason") : aq->why),
                         "server_error", ""});
        return;
      }
      if (a.wav) {
        const auto file = encode_wav(aq->pending, rate_, wav_format::pcm16);
        res.set_content(std::string(reinterpret_cast<const char*>(file.data()), file.size()), type);
      } else {
        res.set_content(pcm16_bytes(aq->pending, rate_), type);
      }
      return;
    }
    // Streaming: the header, then each window's samples as it lands. A write that fails (the client went
    // away) cancels the request at once; so does a connection httplib ends without success. Chunked, or for an
    // HTTP/1.0 client (a proxy such as nginx speaks it to its upstream by default) the bytes as they are, the end
    // of the connection ending them: there a failed request cannot be told from a whole one.
    auto header_sent = std::make_shared<bool>(!a.wav);
    auto provider = [this, aq, id, header_sent, open](std::size_t, httplib::DataSink& sink) {
      if (!*header_sent) {
        *header_sent = true;
        const auto h = streaming_wav_header(rate_);
        if (!sink.write(h.data(), h.size())) return cancel_for(id);
      }
      std::vector<float> chunk;
      bool ended = false;
      mstar::request_end how = mstar::request_end::failed;
      {
        std::unique_lock g(aq->lock);
        aq->cv.wait_for(g, std::chrono::milliseconds(200), [&] { return aq->ended || !aq->pending.empty(); });
        chunk.swap(aq->pending);
        ended = aq->ended;
        how = aq->how;
      }
      if (!chunk.empty()) {
        const auto bytes = pcm16_bytes(chunk, rate_);
        if (!sink.write(bytes.data(), bytes.size())) return cancel_for(id);
      } else if (!ended && !sink.is_writable()) {
        return cancel_for(id);
      }
      if (ended) {
        if (how != mstar::request_end::completed) return false; // cut: the client sees no final chunk
        sink.done();
      }
      return true;
    };
    // Cancelled whatever the success: cpp-httplib reports success for a stream that a stop cut short (its provider
    // is not called again), whose request would otherwise run on. One that ended is left alone.
    auto release = [this, id](bool) { svc_.cancel(id); };
    if (q.version == "HTTP/1.0") // no chunked transfer there: the stream goes out close-delimited
      res.set_content_provider(type, std::move(provider), std::move(release));
    else
      res.set_chunked_content_provider(type, std::move(provider), std::move(release));
  }

  bool cancel_for(mstar::request_id id) {
    svc_.cancel(id);
    return false;
  }

  std::string metrics() {
    std::ostringstream o;
    const auto c = svc_.counts();
    const auto& w = svc_.worker().counters();
    auto gauge = [&](const char* name, const char* help, double v, const char* type = "gauge") {
      o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << v << "\n";
    };
    o << "# HELP qwen3tts_requests_total Speech requests by outcome (rejected: refused with a 4xx, or a 503 "
         "while stopping, before any work)\n# TYPE qwen3tts_requests_total counter\n";
    o << "qwen3tts_requests_total{outcome=\"completed\"} " << c.completed << "\n";
    o << "qwen3tts_requests_total{outcome=\"cancelled\"} " << c.cancelled << "\n";
    o << "qwen3tts_requests_total{outcome=\"failed\"} " << c.failed << "\n";
    o << "qwen3tts_requests_total{outcome=\"rejected\"} " << rejected_.load() << "\n";
    gauge("qwen3tts_live_requests", "requests the worker has admitted and not ended", c.live);
    gauge("qwen3tts_queued_requests", "requests submitted and waiting for admission", c.queued);
    first_audio_.write(o, "qwen3tts_first_audio_seconds", "from submission to a request's first audio chunk");
    gap_.write(o, "qwen3tts_chunk_gap_seconds", "between consecutive audio chunks of a request");
    gauge("qwen3tts_audio_seconds_total", "seconds of audio produced (sent or not)",
          double(samples_.load()) / double(rate_), "counter");
    gauge("qwen3tts_kv_free_blocks", "free blocks of the Talker's KV cache", svc_.kv_free_blocks());
    gauge("qwen3tts_kv_blocks", "blocks of the Talker's KV cache", svc_.kv_blocks());
    gauge("qwen3tts_codec_free_slots", "free slots of the codec state pool", svc_.codec_free_slots());
    gauge("qwen3tts_codec_slots", "slots of the codec state pool", svc_.codec_slots());
    gauge("qwen3tts_codec_steps_total", "codec steps run", double(w.side_steps.load()), "counter");
    gauge("qwen3tts_codec_steps_on_lane_total", "codec steps run on the side lane (the rest on the chain's stream)",
          double(w.side_steps_on_lane.load()), "counter");
    gauge("qwen3tts_talker_steps_total", "Talker steps run (prefill and decode)", double(w.chain_steps.load()),
          "counter");
    const double side = double(w.side_steps.load());
    gauge("qwen3tts_lane_on_share", "share of codec steps run on the side lane",
          side > 0 ? double(w.side_steps_on_lane.load()) / side : 0.0);
    // The worker's steps' busy time (the union over its streams; on the host backend, its stream threads).
    const auto busy = svc_.worker().busy_so_far();
    const double since_start = double(mstar::metrics::now_ns() - busy.t0);
    gauge("qwen3tts_gpu_busy_seconds_total", "time the device ran the worker's steps (the union over its streams)",
          double(busy.busy) / 1e9, "counter");
    gauge("qwen3tts_gpu_busy_fraction", "GPU busy time over the time since the worker started",
          since_start > 0 ? std::min(1.0, double(busy.busy) / since_start) : 0.0);
    return o.str();
  }

  serve_options o_;
  talker_host talker_;
  codec_decoder codec_;
  text_tokenizer tok_;
  int rate_;
  bool voice_design_ = false;
  service svc_;
  std::atomic<std::uint32_t> in_flight_{0}, open_answers_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> rejected_{0}, samples_{0};
  histogram first_audio_, gap_;
};

// Debian's cpp-httplib 0.11 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into its library, so
// no define here changes it), and the server has no accessor for its socket. With more clients connecting at once
// the accept queue overflows: the kernel drops the handshake's last ACK, so a client waits a second for the
// SYN-ACK to come again, or sees its connection reset ("no answer: Read" in loadgen-http at c = 64). Listening
// again on a listening socket sets its backlog (Linux), so the bound socket is found among the process's
// descriptors -- listening, on this port -- and given SOMAXCONN. Nothing is changed where none is found.
void widen_listen_backlog(int port) {
  const long open_max = sysconf(_SC_OPEN_MAX);
  for (int fd = 0; fd < (open_max > 0 ? std::min<long>(open_max, 65536) : 1024); ++fd) {
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) continue;
    if (port_of(addr) == port) ::listen(fd, SOMAXCONN);
  }
}

} // namespace

int serve_main(int argc, char** argv) {
  CLI::App app{"qwen3tts serve: an HTTP server for a Qwen3-TTS 12 Hz checkpoint (CustomVoice or VoiceDesign) with "
               "OpenAI's POST /v1/audio/speech (streamed or whole), GET /health and GET /metrics. The first line on "
               "stdout is the address it listens on",
               "qwen3tts serve"};
  serve_options o;
  app.add_option("--model", o.model_dir, "checkpoint folder in the official layout")->required();
  app.add_option("--host", o.host, "address to bind (loopback by default)")->capture_default_str();
  app.add_option("--port", o.port, "port; 0: any free port")->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--max-text", o.max_text, "longest input (and instructions) in bytes")->capture_default_str();
  app.add_option("--max-frames", o.max_frames, "most frames a request may make (12.5 a second)")
      ->check(CLI::Range(1u, 8191u))
      ->capture_default_str();
  app.add_option("--max-live", o.max_live, "requests computed at once")
      ->check(CLI::Range(1u, pipeline::host_speech::codec_slots - 1))
      ->capture_default_str();
  app.add_option("--max-batch", o.max_batch,
                 "rows of a step at most (of the Talker's decode, of the codec's); at most --max-live (default: 16, "
                 "or --max-live when less)")
      ->check(CLI::Range(1u, pipeline::host_speech::codec_slots - 1))
      ->capture_default_str();
  app.add_option("--max-queued", o.max_queued, "requests waiting beyond those; more get 429")
      ->check(CLI::Range(0u, 4096u))
      ->capture_default_str();
  app.add_option("--max-body", o.max_body, "largest request body in bytes (more: 413)")->capture_default_str();
  app.add_option("--seed", o.seed, "sampling seed of requests that give none")->capture_default_str();
  app.add_option("--lane", o.lane, "the codec's side lane: off, on or auto")
      ->check(CLI::IsMember({"off", "on", "auto"}))
      ->capture_default_str();
  app.add_option("--window", o.window, "the codec's window widths in frames, the last repeating")
      ->capture_default_str();
  app.add_option("--language", o.language,
                 "the language of every request: auto (the model tells) or one of the checkpoint's "
                 "(config.json talker_config.codec_language_id)")
      ->capture_default_str();
  app.add_option(
         "--device", o.cuda.device,
         "where the model runs: host, cuda (the CUDA Talker and codec) or auto (cuda where this build has it and "
         "a GPU is present, host otherwise)")
      ->check(CLI::IsMember({"host", "cuda", "auto"}))
      ->capture_default_str();
  add_cuda_flags(app, o.cuda);
  add_codec_wait_flags(app, o.cuda, o.codec_wait_ms);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2; // CLI11's own codes (106 for a missing option, ...); --help is 0
  }
  // A step's rows are live requests, so a wider step could never fill; the default follows --max-live.
  if (app.count("--max-batch") && o.max_batch > o.max_live) {
    std::cerr << "qwen3tts serve: --max-batch " << o.max_batch << " is above --max-live " << o.max_live
              << ": a step's rows are live requests, so give --max-batch at most " << o.max_live
              << " (or raise --max-live)\n";
    return 2;
  }
  o.max_batch = std::min(o.max_batch, o.max_live);
  try {
    if (auto refusal = check_language(read_talker_config(o.model_dir), o.language, client_options)) {
      std::cerr << "qwen3tts serve: " << refusal->message << "\n";
      return 2;
    }
    std::transform(o.language.begin(), o.language.end(), o.language.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); }); // as /health shows it
  } catch (const std::exception& e) {
    std::cerr << "qwen3tts serve: " << e.what() << "\n";
    return 1;
  }

  // SIGINT/SIGTERM stop the server from a thread of their own (not in a signal handler); a write to a
  // client that went away fails with EPIPE instead of killing the process.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  try {
    server srv(o);
    httplib::Server http;
    http.set_tcp_nodelay(true); // a streamed chunk goes out at once, not after the client's delayed ACK
    // SO_REUSEADDR alone (a restart binds a port whose old connections linger in TIME_WAIT): cpp-httplib's default
    // sets SO_REUSEPORT on Linux, which let a second server bind a port that one listens on, the kernel then
    // splitting the connections between them.
    http.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    const std::size_t threads = std::size_t(o.max_live) + o.max_queued + 16; // a streaming client holds one
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    srv.install(http);
    const int port = o.port == 0 ? http.bind_to_any_port(o.host) : (http.bind_to_port(o.host, o.port) ? o.port : -1);
    if (port < 0) {
      std::cerr << "qwen3tts serve: cannot bind " << o.host << ":" << o.port << " (in use, or not an address here)\n";
      return 1;
    }
    widen_listen_backlog(port);
    // An IPv6 literal goes in brackets, so that the line is a URL one can paste.
    const std::string shown = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
    std::printf("listening on http://%s:%d\n", shown.c_str(), port);
    std::fflush(stdout);
    // The first signal stops new requests; the server stops listening once the accepted answers went out whole,
    // or at a second signal (whose streams are then cut, and their requests cancelled).
    std::thread stopper([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      if (sig == SIGTERM && !http.is_running()) return; // the pthread_kill below: the server stopped on its own
      srv.begin_stop();
      const timespec tick{0, 50'000'000};
      while (srv.open_answers() > 0 && sigtimedwait(&stop_signals, nullptr, &tick) < 0) {
      }
      http.stop();
    });
    const bool ok = http.listen_after_bind();
    pthread_kill(stopper.native_handle(), SIGTERM); // a stop from elsewhere: end the waiting thread too
    stopper.join();
    std::cerr << "qwen3tts serve: stopped\n";
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "qwen3tts serve: " << e.what() << "\n";
    return 1;
  }
}

} // namespace qwen3_tts::serve
