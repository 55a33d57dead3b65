// What the test NVTX tool (nvtx_recorder.cpp) saw: ranges per OS thread and thread names.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nvtx_recorder {

struct event {
  std::uint32_t thread = 0;
  bool push = false;  // false: a pop
  std::string name;   // the range's registered name (pushes only)
  std::string domain; // the domain's name
  std::uint32_t color = 0;
};

std::vector<event> take();                     // every event so far, in order; clears them
std::map<std::uint32_t, std::string> threads(); // OS thread id -> name given
std::uint32_t current_thread();

} // namespace nvtx_recorder
