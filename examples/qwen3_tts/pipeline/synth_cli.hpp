// The `qwen3tts synth` subcommand: text (as token ids until the tokenizer lands), a speaker or an
// instruction, a language -> a 24 kHz WAV, through mstar's engine and worker on the host backend (the
// Talker on the chain, the codec beside it on the side lane). argv[0] is the subcommand's name; returns the
// process exit status (errors on stderr).
#pragma once

namespace qwen3_tts::pipeline {

int synth_main(int argc, char** argv);

} // namespace qwen3_tts::pipeline
