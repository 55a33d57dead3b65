// A fixed-capacity vector usable in constant expressions: the descriptors hold these so that the
// same validator runs inside static_assert (C++ policies) and at load time (YAML).
#pragma once

#include <array>
#include <cstddef>

namespace mstar {

template <class T, std::size_t Capacity>
class static_vector {
public:
  using value_type = T;
  static constexpr std::size_t capacity = Capacity;

  constexpr static_vector() = default;
  constexpr static_vector(std::initializer_list<T> init) {
    for (const T& v : init) push_back(v);
  }

  // Returns false (and stores nothing) when full; callers report the overflow with a reason.
  constexpr bool push_back(const T& v) {
    if (size_ == Capacity) return false;
    items_[size_++] = v;
    return true;
  }
  constexpr void clear() { size_ = 0; }
  constexpr void pop_back() { --size_; }
  constexpr bool full() const { return size_ == Capacity; }
  constexpr std::size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr T& operator[](std::size_t i) { return items_[i]; }
  constexpr const T& operator[](std::size_t i) const { return items_[i]; }
  constexpr T* begin() { return items_.data(); }
  constexpr T* end() { return items_.data() + size_; }
  constexpr const T* begin() const { return items_.data(); }
  constexpr const T* end() const { return items_.data() + size_; }
  constexpr T& back() { return items_[size_ - 1]; }

  constexpr bool contains(const T& v) const {
    for (const T& x : *this)
      if (x == v) return true;
    return false;
  }

  friend constexpr bool operator==(const static_vector& a, const static_vector& b) {
    if (a.size_ != b.size_) return false;
    for (std::size_t i = 0; i < a.size_; ++i)
      if (!(a.items_[i] == b.items_[i])) return false;
    return true;
  }

private:
  std::array<T, Capacity> items_{};
  std::size_t size_ = 0;
};

} // namespace mstar
