// expect-compiles
// The control case: the Qwen3-TTS model compiles with both compilers, with codec_chunk on the side
// lane. If this fails, every refusal above could be failing for an unrelated reason.
#include "qwen3_tts/model.hpp"

static_assert(qwen3_tts::Model::verdict.ok());
static_assert(qwen3_tts::Model::is_side_node<qwen3_tts::CodecChunk>);
static_assert(!qwen3_tts::Model::is_side_node<qwen3_tts::TalkerDecode>);
static_assert(qwen3_tts::Model::is_side_resource<qwen3_tts::CodecState>);
