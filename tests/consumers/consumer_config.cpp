// A program outside mstar that loads a YAML model through the installed loader (CMake mstar::config):
// one valid config, and one the side-lane rules refuse. run_consumers.py checks what it prints.
#include <mstar/model/config.hpp>

#include <cstdio>

int main() {
  const char* valid = R"(model: consumer_tts
resources:
  kv_cache:    {kind: kv_cache, blocks: 64, block_tokens: 16}
  positions:   {kind: positions}
  attention:   {kind: attention, depends_on: [kv_cache, positions]}
  sampler:     {kind: sampler}
  codec_state: {kind: recurrent_pool, dtype: bf16, shape: [16, 1024], layers: 8, slots: 9}
nodes:
  talker_decode: {resources: [kv_cache, attention, positions, sampler], walks: [chain], stop_checks: true}
  codec_chunk:   {resources: [codec_state]}
workers:
  - name: gpu0
    groups:
      - {name: Talker, nodes: [talker_decode]}
      - {name: Codec, side_stream: true, nodes: [codec_chunk]}
)";
  const auto ok = mstar::parse_model(valid, "valid.yaml");
  std::printf("valid.yaml: %s\n", ok ? "valid" : "refused");
  const auto refused = mstar::parse_model(
      R"(model: m
resources:
  kv_cache: {kind: kv_cache, blocks: 64, block_tokens: 16}
nodes:
  talker_decode: {resources: [kv_cache], walks: [chain]}
  codec_chunk: {resources: [kv_cache]}
workers:
  - name: gpu0
    groups:
      - {name: Talker, nodes: [talker_decode]}
      - {name: Codec, side_stream: true, nodes: [codec_chunk]}
)",
      "refused.yaml");
  std::printf("refused.yaml: %s, %zu error(s)\n", refused ? "valid" : "refused", refused.errors().size());
  return ok && !refused ? 0 : 1;
}
