// libFuzzer target for the YAML loader (include/mstar/model/config.hpp). Built and run by run_fuzz.sh with
// clang++ -fsanitize=fuzzer,address,undefined. Beyond "no crash, no hang, no leak", it checks the
// loader's contract: a load gives a model the validator accepted, or well-formed errors.
#include "contract.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <mstar/model/config.hpp>

using mstar_fuzz::broken;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto r = mstar::parse_model(text, "fuzz.yaml");
  if (r.ok()) {
    const auto& m = r.model();
    if (!r.errors().empty()) broken("a loaded model with errors");
    if (!m.verdict.ok()) broken("a loaded model the validator refused");
    if (!mstar::validate(m.desc).ok()) broken("a descriptor that validates differently a second time");
    if (m.verdict.lanes.size() != m.desc.nodes.size()) broken("a lane per node");
    if (m.marks.nodes.size() != m.desc.nodes.size() || m.marks.resources.size() != m.desc.resources.size() ||
        m.marks.groups.size() != m.desc.groups.size() || m.marks.workers.size() != m.desc.workers.size())
      broken("a position per descriptor entry");
    // Every finding formats, for any index the report could hold.
    for (std::uint8_t i = 0; i < 4; ++i) {
      mstar::finding f{.rule = static_cast<mstar::rule>(i * 7 % mstar::rule_count),
                       .resource = i,
                       .node = i,
                       .group = i,
                       .worker = i,
                       .other = i};
      if (mstar::error_of(m, f).message.empty()) broken("an empty message");
    }
  } else {
    if (r.errors().empty()) broken("a failed load without errors");
    if (r.errors().size() > mstar::max_config_errors + 1) broken("more errors than the cap");
    for (const auto& e : r.errors()) {
      if (!e.message.starts_with("fuzz.yaml")) broken("a message that does not name the file");
      if (e.message.find("error [" + e.rule_id + "]: ") == std::string::npos) broken("a message without its rule");
      if (e.line < 0 || e.column < 0) broken("a negative position");
    }
  }
  return 0;
}
