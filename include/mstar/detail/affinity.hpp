// CPU affinity of the worker's threads: the CPUs this process may run on (sched_getaffinity), pinning
// the calling thread to one of them (pthread_setaffinity_np), and reading back the set a thread got.
// A per-step handoff between two threads costs a cache-line transfer when each has a core of its own
// (~0.6 us measured on the H200 host), and several microseconds more when the scheduler moves them or
// puts a third thread on their core; pinning is how a deployment gives them their own cores.
// Linux only: elsewhere allowed_cpus() is empty and pinning throws.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace mstar::detail {

// The CPUs (OS numbers, ascending) the calling process may run on.
inline std::vector<int> allowed_cpus() {
  std::vector<int> v;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return v;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) v.push_back(c);
#endif
  return v;
}

// "0-3,6,8-9": a CPU list as taskset and /proc print it.
inline std::string format_cpus(const std::vector<int>& cpus) {
  std::string s;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1)
      ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(cpus[i]);
    if (j > i) s += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return s.empty() ? "none" : s;
}

// Empty when `cpu` may be used (or is -1, unpinned); otherwise the sentence saying why not and what to
// do, naming `who` (the option, e.g. "affinity.gpu").
inline std::string check_cpu(const char* who, int cpu, const std::vector<int>& allowed) {
  if (cpu == -1) return {};
  bool ok = false;
  for (int c : allowed)
    ok |= c == cpu;
  if (ok) return {};
#if defined(__linux__)
  return std::string(who) + " is CPU " + std::to_string(cpu) + ", which this process may not run on (allowed: " +
         format_cpus(allowed) + ", per sched_getaffinity); pick one of those or leave it unpinned (-1)";
#else
  return std::string(who) + " is CPU " + std::to_string(cpu) +
         " but thread affinity is only supported on Linux; leave it unpinned (-1)";
#endif
}

// Pins the calling thread to `cpu`; throws with the OS's reason when that fails.
inline void pin_this_thread(int cpu) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (const int e = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); e != 0)
    throw std::runtime_error("pthread_setaffinity_np to CPU " + std::to_string(cpu) + " failed with error " +
                             std::to_string(e) + " (22: not an allowed CPU, 1: no permission)");
#else
  throw std::runtime_error("thread affinity is only supported on Linux (CPU " + std::to_string(cpu) + ")");
#endif
}

// The CPUs the calling thread may run on now.
inline std::vector<int> this_thread_cpus() {
  std::vector<int> v;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) return v;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) v.push_back(c);
#endif
  return v;
}

} // namespace mstar::detail
