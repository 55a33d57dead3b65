// qwen3tts_decode: the decode subcommand as its own program until qwen3tts carries it.
#include "decode_cli.hpp"

int main(int argc, char** argv) { return qwen3_tts::decode_main(argc, argv); }
