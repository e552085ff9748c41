// A growable array of scratch values for the tile-statistics kernels.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>

namespace tensormorph::cpu {

/// An array whose contents the caller always writes before reading: growing it neither copies the
/// old elements nor zero-fills the new ones. (std::vector::resize does both: a one-shot index run
/// spent 4-5% of its samples in that memset and copy for slot arrays the kernels overwrite.)
template <typename T>
class ScratchBuffer {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>);

 public:
  /// At least `count` elements of unspecified value, valid until the next call that grows it.
  T* at_least(size_t count) {
    if (count > capacity_) {
      data_.reset();  // before the new allocation: the old contents are not kept
      data_.reset(new T[count]);  // default-initialised: no fill
      capacity_ = count;
    }
    return data_.get();
  }
  /// The elements, or nullptr before the first at_least.
  T* data() const { return data_.get(); }
  /// Elements held.
  size_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<T[]> data_;
  size_t capacity_ = 0;
};

}  // namespace tensormorph::cpu
