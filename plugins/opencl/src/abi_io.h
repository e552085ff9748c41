// Reading and writing the ABI's size-prefixed structs without trusting either side's layout size.
//
// Every ABI struct starts with `size_t struct_size`. A struct the host filled is read only up to
// its struct_size (later fields read as zero); a struct this plugin fills is written only up to
// the size the caller says it holds (struct_size 0 meaning "this header's size"), and struct_size
// is then set to the bytes written.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "errors.h"

namespace tm_opencl {

/// The struct_size field of a caller's struct, read without assuming its alignment.
inline size_t declared_struct_size(const void* p) {
  size_t size = 0;
  std::memcpy(&size, p, sizeof size);
  return size;
}

/// A copy of the caller's struct at `p`: its first min(struct_size, sizeof(T)) bytes, the rest zero.
/// The copy's struct_size is the number of bytes taken.
template <typename T>
T read_versioned(const T* p) {
  T copy{};
  const size_t taken = std::min(declared_struct_size(p), sizeof(T));
  if (taken >= sizeof(size_t)) std::memcpy(static_cast<void*>(&copy), p, taken);
  copy.struct_size = taken < sizeof(size_t) ? 0 : taken;
  return copy;
}

/// Element `index` of a host array of versioned structs. The host's element size is the first
/// element's struct_size (a host built against another header version has another stride); every
/// element must declare the same size.
template <typename T>
Result<T> read_versioned_element(const T* array, uint32_t index, const char* what) {
  const size_t stride = declared_struct_size(array);
  if (stride < sizeof(size_t)) {
    return invalid_argument(std::string(what) + "[0].struct_size is " + std::to_string(stride) +
                            ", smaller than the struct_size field itself");
  }
  const auto* element = reinterpret_cast<const T*>(reinterpret_cast<const std::byte*>(array) +
                                                   static_cast<size_t>(index) * stride);
  if (declared_struct_size(element) != stride) {
    return invalid_argument(std::string(what) + "[" + std::to_string(index) + "].struct_size is " +
                            std::to_string(declared_struct_size(element)) + " but " + what +
                            "[0].struct_size is " + std::to_string(stride) + "; all elements must match");
  }
  return read_versioned(element);
}

/// Writes `value` into the caller's struct at `out`, no further than the caller's struct_size
/// allows (0 or larger than T: the whole T), and sets struct_size to the bytes written.
template <typename T>
Status write_versioned(T* out, T value) {
  size_t capacity = declared_struct_size(out);
  if (capacity == 0 || capacity > sizeof(T)) capacity = sizeof(T);
  if (capacity < sizeof(size_t)) {
    return invalid_argument("output struct_size " + std::to_string(capacity) +
                            " is smaller than the struct_size field itself");
  }
  value.struct_size = capacity;
  std::memcpy(static_cast<void*>(out), &value, capacity);
  return {};
}

/// The integer stored in a host-filled enum field, read without loading it as the enum type (a
/// value outside the enum's range would be undefined behaviour to load).
template <typename Enum>
int enum_value(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int), "ABI enums are int-sized");
  int value = 0;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

/// Copies `text` into a fixed char array, truncating, always NUL-terminated.
template <size_t N>
void copy_text(char (&destination)[N], const std::string& text) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(destination, text.data(), n);
  destination[n] = '\0';
}

}  // namespace tm_opencl
