// expect-rule: duplicate_group
// expect-group: CodecMisnamed "Talker"
// The codec group copied from the Talker group and left with its name.
#include "qwen3_tts/model.hpp"

// clang-format off
using CodecMisnamed = mstar::group<"Talker", mstar::side_stream, qwen3_tts::CodecChunk>;
using Gpu0          = mstar::worker<"gpu0", qwen3_tts::Talker, CodecMisnamed>;
using Model         = mstar::model<"qwen3_tts", Gpu0>;
// clang-format on

[[maybe_unused]] constexpr auto& verdict = Model::verdict;
