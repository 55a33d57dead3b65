// The `qwen3tts serve` subcommand: an HTTP server (cpp-httplib) over one long-lived speech_service, with
// OpenAI's POST /v1/audio/speech (streamed as chunked WAV or raw PCM as each codec window lands), GET /health
// and GET /metrics (Prometheus text). argv[0] is the subcommand's name; returns the process exit status. The
// first line on stdout is the address it listens on ("listening on http://127.0.0.1:PORT"). docs/serve.md
// describes the endpoints, the bounds and the errors; `qwen3tts loadgen-http` loads a server.
#pragma once

namespace qwen3_tts::serve {

int serve_main(int argc, char** argv);

// `qwen3tts loadgen-http --url http://127.0.0.1:8000 -c N -n M`: closed-loop streaming clients against a server
// (loadgen_http.cpp).
int loadgen_http_main(int argc, char** argv);

// `qwen3tts loadgen --model DIR -c 1,4,16 --lane off,on`: the same closed loop in process, one speech_service per
// lane mode (loadgen.cpp).
int loadgen_main(int argc, char** argv);

} // namespace qwen3_tts::serve
