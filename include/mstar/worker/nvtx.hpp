// NVTX ranges for the worker's threads, so that an Nsight Systems timeline of a program shows what
// each worker thread did and when: one domain ("mstar"), strings registered once (no formatting or
// allocation per range), a colour per node, and each thread named after its worker and role.
//
//   mstar::nvtx::domain d("mstar");
//   const auto launch = d.make_label("talker_decode launch", mstar::nvtx::color_of(1));
//   { mstar::nvtx::range r(d, launch); /* the work */ }
//   mstar::nvtx::name_this_thread("mstar gpu0 gpu");
//
// NVTX3 is header-only (the CUDA toolkit's include/nvtx3). Without a tool attached each call is a
// check of a function pointer; without the headers (a build with no CUDA toolkit) every call here is
// an empty inline function and `mstar::nvtx::available` is false. MSTAR_NO_NVTX turns it off anyway.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#if !defined(MSTAR_NO_NVTX) && __has_include(<nvtx3/nvToolsExt.h>)
#define MSTAR_HAS_NVTX 1
#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#define MSTAR_HAS_NVTX 0
#endif

namespace mstar::nvtx {

inline constexpr bool available = MSTAR_HAS_NVTX != 0;

// A distinct, stable ARGB colour per index (a node's index): golden-ratio hues at full saturation.
constexpr std::uint32_t color_of(std::uint32_t index) noexcept {
  const std::uint32_t hue = (index * 2654435769u) >> 16; // 0..65535
  const std::uint32_t sector = hue / 10923, f = (hue % 10923) * 255 / 10923;
  std::uint32_t r = 0, g = 0, b = 0;
  switch (sector) {
  case 0: r = 255, g = f; break;
  case 1: r = 255 - f, g = 255; break;
  case 2: g = 255, b = f; break;
  case 3: g = 255 - f, b = 255; break;
  case 4: r = f, b = 255; break;
  default: r = 255, b = 255 - f; break;
  }
  return 0xff000000u | (r << 16) | (g << 8) | b;
}

// A range's name and colour, registered once with its domain.
struct label {
#if MSTAR_HAS_NVTX
  nvtxStringHandle_t name = nullptr;
#endif
  std::uint32_t color = 0xff808080u;
};

class domain {
public:
  explicit domain(const char* name) {
#if MSTAR_HAS_NVTX
    handle_ = nvtxDomainCreateA(name);
#else
    (void)name;
#endif
  }
  ~domain() {
#if MSTAR_HAS_NVTX
    nvtxDomainDestroy(handle_);
#endif
  }
  domain(const domain&) = delete;
  domain& operator=(const domain&) = delete;

  label make_label(const std::string& name, std::uint32_t color = 0xff808080u) {
    label l;
    l.color = color;
#if MSTAR_HAS_NVTX
    l.name = nvtxDomainRegisterStringA(handle_, name.c_str());
#else
    (void)name;
#endif
    return l;
  }

  void push(const label& l) noexcept {
#if MSTAR_HAS_NVTX
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = l.color;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = l.name;
    nvtxDomainRangePushEx(handle_, &a);
#else
    (void)l;
#endif
  }
  void pop() noexcept {
#if MSTAR_HAS_NVTX
    nvtxDomainRangePop(handle_);
#endif
  }

private:
#if MSTAR_HAS_NVTX
  nvtxDomainHandle_t handle_ = nullptr;
#endif
};

// The library's domain, "mstar", one per process: every worker's ranges go to it. Never destroyed (a
// worker may push ranges while statics are torn down, and tools key a domain by its handle).
inline domain& mstar_domain() {
  static domain* d = new domain("mstar");
  return *d;
}

// A range from its construction to its end of scope, on the calling thread.
class range {
public:
  range(domain& d, const label& l) noexcept : d_(&d) { d_->push(l); }
  ~range() { d_->pop(); }
  range(const range&) = delete;
  range& operator=(const range&) = delete;

private:
  domain* d_;
};

// Names the calling OS thread in the timeline.
inline void name_this_thread(const std::string& name) {
#if MSTAR_HAS_NVTX
  nvtxNameOsThreadA(static_cast<std::uint32_t>(::syscall(SYS_gettid)), name.c_str());
#else
  (void)name;
#endif
}

} // namespace mstar::nvtx
