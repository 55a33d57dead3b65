// qwen3tts_synth: synth_codes_main on its own, until the qwen3tts binary takes it as a subcommand.
namespace qwen3_tts {
int synth_codes_main(int argc, char** argv);
}

int main(int argc, char** argv) { return qwen3_tts::synth_codes_main(argc, argv); }
