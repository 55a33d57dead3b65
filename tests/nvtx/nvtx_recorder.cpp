// A statically linked NVTX tool for tests: NVTX's loader finds InitializeInjectionNvtx2_fnptr (a
// strong definition here overrides the headers' weak one) and this tool records what the program
// under test emits: ranges pushed and popped per OS thread, by registered name, and thread names.
#define NVTX_STATIC_INJECTION_IMPL
#include "nvtx_recorder.hpp"

#include <cstdint>

// Declared before the NVTX headers, whose loader refers to it (NVTX_STATIC_INJECTION_IMPL: the
// definition is below, instead of the headers' weak one).
extern "C" {
extern int (*InitializeInjectionNvtx2_fnptr)(const void* (*)(std::uint32_t));
}

#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <utility>

namespace {

std::mutex lock;
std::deque<std::string> strings; // registered strings and domain names; handles point into it
std::vector<nvtx_recorder::event> events;
std::map<std::uint32_t, std::string> thread_names;

std::uint32_t this_tid() { return static_cast<std::uint32_t>(::syscall(SYS_gettid)); }

nvtxDomainHandle_t domain_create(const char* name) {
  std::lock_guard g(lock);
  strings.emplace_back(name);
  return reinterpret_cast<nvtxDomainHandle_t>(&strings.back());
}
nvtxStringHandle_t register_string(nvtxDomainHandle_t, const char* s) {
  std::lock_guard g(lock);
  strings.emplace_back(s);
  return reinterpret_cast<nvtxStringHandle_t>(&strings.back());
}
int push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::lock_guard g(lock);
  nvtx_recorder::event e{this_tid(), true, {}, *reinterpret_cast<const std::string*>(d), a->color};
  if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED)
    e.name = *reinterpret_cast<const std::string*>(a->message.registered);
  else if (a->messageType == NVTX_MESSAGE_TYPE_ASCII)
    e.name = a->message.ascii;
  events.push_back(std::move(e));
  return 0;
}
int pop(nvtxDomainHandle_t d) {
  std::lock_guard g(lock);
  events.push_back({this_tid(), false, {}, *reinterpret_cast<const std::string*>(d), 0});
  return 0;
}
void name_thread(std::uint32_t tid, const char* name) {
  std::lock_guard g(lock);
  thread_names[tid] = name;
}

template <class F>
void set(NvtxFunctionTable table, unsigned size, unsigned id, F f) {
  if (id < size && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(f);
}

int initialize(NvtxGetExportTableFunc_t get) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get(NVTX_ETID_CALLBACKS));
  if (!callbacks) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) return 0;
  set(table, size, NVTX_CBID_CORE2_DomainCreateA, &domain_create);
  set(table, size, NVTX_CBID_CORE2_DomainRegisterStringA, &register_string);
  set(table, size, NVTX_CBID_CORE2_DomainRangePushEx, &push);
  set(table, size, NVTX_CBID_CORE2_DomainRangePop, &pop);
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size)) return 0;
  set(table, size, NVTX_CBID_CORE_NameOsThreadA, &name_thread);
  return 1;
}

} // namespace

extern "C" {
NvtxInitializeInjectionNvtxFunc_t InitializeInjectionNvtx2_fnptr = &initialize;
}

namespace nvtx_recorder {

std::vector<event> take() {
  std::lock_guard g(lock);
  return std::exchange(events, {});
}
std::map<std::uint32_t, std::string> threads() {
  std::lock_guard g(lock);
  return thread_names;
}
std::uint32_t current_thread() { return this_tid(); }

} // namespace nvtx_recorder
