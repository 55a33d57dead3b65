// libFuzzer target for the safetensors reader (examples/qwen3_tts/checkpoint/safetensors.hpp). Built and run by
// run_fuzz.sh with clang++ -fsanitize=fuzzer,address,undefined. The input is a whole file's contents, read
// through the in-memory constructor (the same validation the mmap one runs; the bytes sit in a heap buffer of
// exactly the input's size, so ASan sees a view one byte past the end, which a page-rounded mapping hides).
// Beyond "no crash, no hang, no leak", it checks the reader's contract: a refusal is a checkpoint_error naming
// the file; an accepted file's views lie inside the input, hold exactly the bytes their dtype and shape need,
// do not overlap, and are found by name; every byte of every view is read.
#include "contract.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qwen3_tts/checkpoint/safetensors.hpp"

using mstar_fuzz::broken;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> contents(size);
  if (size) std::memcpy(contents.data(), data, size);
  try {
    const qwen3_tts::safetensors_file f("fuzz.safetensors", std::move(contents));
    unsigned sum = 0;
    const std::byte* prev_end = nullptr;
    for (const auto& t : f.tensors()) {
      if (t.file != "fuzz.safetensors") broken("a view that does not name its file");
      if (f.find(t.name) != &t) broken("a tensor find() does not return");
      const auto n = t.numel();
      if (n < 0) broken("a negative element count");
      if (std::uint64_t(n) * qwen3_tts::dtype_size(t.dtype) != t.bytes.size())
        broken("a view whose size disagrees with its shape");
      if (!t.bytes.empty() && prev_end && t.bytes.data() < prev_end) broken("overlapping views");
      if (!t.bytes.empty() && (!prev_end || t.bytes.data() + t.bytes.size() > prev_end))
        prev_end = t.bytes.data() + t.bytes.size(); // the furthest end so far: a view inside another is caught too
      for (const std::byte b : t.bytes)
        sum += unsigned(b); // ASan: every byte lies inside the input
      (void)qwen3_tts::shape_string(t.shape);
      // The conversions the loaders call; a dtype they do not read is refused with a checkpoint_error.
      try {
        if (qwen3_tts::to_f32(t).size() != std::size_t(n)) broken("to_f32 returned the wrong count");
      } catch (const qwen3_tts::checkpoint_error&) {
      }
      try {
        if (qwen3_tts::to_i64(t).size() != std::size_t(n)) broken("to_i64 returned the wrong count");
      } catch (const qwen3_tts::checkpoint_error&) {
      }
    }
    if (f.tensors().size() > size) broken("more tensors than bytes");
    (void)f.metadata().size();
    (void)f.find("");
    __asm__ volatile("" : : "r"(sum));
  } catch (const qwen3_tts::checkpoint_error& e) {
    if (!std::string(e.what()).starts_with("fuzz.safetensors")) broken("a message that does not name the file");
  }
  return 0;
}
