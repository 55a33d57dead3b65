// The weights of one checkpoint folder, looked up by their checkpoint names.
//
// A folder holds either one `model.safetensors` or shards listed by `model.safetensors.index.json`
// ({"weight_map": {tensor: shard file}}), as Hugging Face writes them (the single file wins when both exist,
// as in transformers). The index is checked against the shards when the store opens: every shard it names
// exists, every tensor is in the shard the index names, and no shard holds a tensor the index leaves out or
// puts elsewhere. Views stay valid while the store lives (moving the store keeps them).
#pragma once

#include "qwen3_tts/checkpoint/safetensors.hpp"

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qwen3_tts {

class weight_store {
public:
  // Opens `folder`'s weights; throws checkpoint_error naming the folder, file or tensor at fault.
  static weight_store open(const std::filesystem::path& folder);

  const std::filesystem::path& folder() const noexcept { return folder_; }
  // nullptr when the checkpoint has no tensor of that name.
  const tensor_view* find(std::string_view name) const noexcept;
  // The tensor, or a checkpoint_error: "missing: ..." when absent.
  const tensor_view& require(std::string_view name) const;
  // The tensor with exactly this shape, or a checkpoint_error naming the tensor, its file, and the expected
  // and found shapes.
  const tensor_view& require(std::string_view name, std::span<const std::int64_t> shape) const;
  const tensor_view& require(std::string_view name, std::initializer_list<std::int64_t> shape) const {
    return require(name, std::span<const std::int64_t>(shape.begin(), shape.size()));
  }
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  std::size_t size() const noexcept { return by_name_.size(); }
  // Bytes of every tensor's data (what a load reads).
  std::uint64_t data_bytes() const noexcept;
  // The files in the order they were opened (one, or the shards sorted by name).
  std::span<const std::unique_ptr<safetensors_file>> files() const noexcept { return files_; }

private:
  std::filesystem::path folder_;
  std::vector<std::unique_ptr<safetensors_file>> files_; // heap-held: views point into them across moves
  std::map<std::string, const tensor_view*, std::less<>> by_name_;
};

} // namespace qwen3_tts
