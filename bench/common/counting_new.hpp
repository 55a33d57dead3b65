// Global operator new and delete that count: malloc-backed replacements that call
// mstar_bench::count_allocation() before every allocation, so that a benchmark or an allocation test
// can tell how many heap allocations a code path makes. They are definitions: include this header in
// exactly one translation unit of an executable (its own executable, so the counting stays out of
// every other binary), and define count_allocation there (noexcept, and allocating nothing itself).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace mstar_bench {
void count_allocation() noexcept;
} // namespace mstar_bench

// g++ cannot tell that these replace the global operators, and warns that free() meets operator new.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t n) {
  mstar_bench::count_allocation();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  mstar_bench::count_allocation();
  const std::size_t al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return ::operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
