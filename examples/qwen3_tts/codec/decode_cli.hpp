// The `qwen3tts decode` subcommand: --model DIR --codes FILE --out a.wav [--window 1,2,4,8] [--float].
// argv[0] is the subcommand's name; returns the process exit status (errors are printed to stderr).
#pragma once

namespace qwen3_tts {

int decode_main(int argc, char** argv);

} // namespace qwen3_tts
