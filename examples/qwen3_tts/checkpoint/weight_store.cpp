// Opening a folder's weights and checking a shard index against its shards (see weight_store.hpp).
#include "qwen3_tts/checkpoint/weight_store.hpp"

#include "qwen3_tts/checkpoint/json_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

namespace qwen3_tts {

namespace {

constexpr std::string_view single_name = "model.safetensors";
constexpr std::string_view index_name = "model.safetensors.index.json";

// The index's weight_map, checked for shape: tensor name -> shard file name (a plain name inside the folder).
std::map<std::string, std::string> read_weight_map(const std::filesystem::path& index_path) {
  const auto index = read_json_object(index_path);
  const auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object())
    throw checkpoint_error(index_path.string() + ": field 'weight_map' is missing or not an object of "
                                                 "{tensor: shard file}; write the index again with save_pretrained");
  std::map<std::string, std::string> out;
  for (const auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string())
      throw checkpoint_error(index_path.string() + ": weight_map entry for tensor '" + tensor + "' is " + shard.dump() +
                             ", not a shard file name");
    const std::filesystem::path shard_path(shard.get<std::string>());
    if (shard_path.empty() || shard_path.has_parent_path() || shard_path.is_absolute() || shard_path == ".." ||
        shard_path == ".")
      throw checkpoint_error(index_path.string() + ": weight_map puts tensor '" + tensor + "' in '" + shard_path.string() +
                             "', which is not a file name inside the checkpoint folder; shards must sit beside the index");
    out.emplace(tensor, shard_path.string());
  }
  if (out.empty())
    throw checkpoint_error(index_path.string() + ": weight_map lists no tensors; write the index again with save_pretrained");
  return out;
}

} // namespace

weight_store weight_store::open(const std::filesystem::path& folder) {
  weight_store store;
  store.folder_ = folder;
  const auto single = folder / single_name;
  const auto index_path = folder / index_name;
  std::error_code ec;

  if (std::filesystem::is_regular_file(single, ec)) {
    store.files_.push_back(std::make_unique<safetensors_file>(single));
    for (const auto& t : store.files_.back()->tensors()) store.by_name_.emplace(t.name, &t);
    return store;
  }
  if (!std::filesystem::is_regular_file(index_path, ec))
    throw checkpoint_error(single.string() + ": missing, and no " + std::string(index_name) +
                           " names shards instead; is this a Qwen3-TTS 12 Hz checkpoint folder?");

  const auto weight_map = read_weight_map(index_path);
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : weight_map) {
    if (shards.contains(shard)) continue;
    if (!std::filesystem::is_regular_file(folder / shard, ec))
      throw checkpoint_error(index_path.string() + ": shard '" + shard + "' (holding tensor '" + tensor +
                             "') does not exist in " + folder.string() + "; the download is incomplete: fetch every "
                             "model-*.safetensors file the index names");
    shards.insert(shard);
  }
  for (const auto& shard : shards) {
    store.files_.push_back(std::make_unique<safetensors_file>(folder / shard));
    const auto& file = *store.files_.back();
    for (const auto& t : file.tensors()) {
      const auto listed = weight_map.find(t.name);
      if (listed == weight_map.end() || listed->second != shard)
        throw checkpoint_error(index_path.string() + ": tensor '" + t.name + "' is in shard '" + shard + "' but the index " +
                               (listed == weight_map.end() ? std::string("does not list it")
                                                           : "puts it in '" + listed->second + "'") +
                               "; the index and the shards come from different exports: fetch them again together");
      store.by_name_.emplace(t.name, &t);
    }
  }
  for (const auto& [tensor, shard] : weight_map)
    if (!store.by_name_.contains(tensor))
      throw checkpoint_error(index_path.string() + ": the index puts tensor '" + tensor + "' in shard '" + shard +
                             "', but " + (folder / shard).string() + " has no such tensor; the index and the shards "
                             "come from different exports: fetch them again together");
  return store;
}

const tensor_view* weight_store::find(std::string_view name) const noexcept {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const tensor_view& weight_store::require(std::string_view name) const {
  if (const auto* t = find(name)) return *t;
  throw checkpoint_error("missing: the checkpoint has no tensor " + std::string(name) + " (in " + folder_.string() +
                         "); is this a Qwen3-TTS 12 Hz checkpoint folder?");
}

const tensor_view& weight_store::require(std::string_view name, std::span<const std::int64_t> shape) const {
  const auto& t = require(name);
  if (!std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end()))
    throw checkpoint_error(t.file.string() + ": tensor '" + t.name + "' has shape " + shape_string(t.shape) +
                           ", expected " + shape_string(shape) + "; config.json and the weights disagree: are they "
                           "from the same checkpoint?");
  return t;
}

std::vector<std::string> weight_store::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (const auto& [name, view] : by_name_) out.push_back(name);
  return out;
}

std::uint64_t weight_store::data_bytes() const noexcept {
  std::uint64_t n = 0;
  for (const auto& [name, view] : by_name_)
    n += view->bytes.size();
  return n;
}

} // namespace qwen3_tts
