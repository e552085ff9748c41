// Reading float32 and BF16 elements where they lie, for the CPU kernels that skip decoding them.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tensormorph::cpu {

/// The float32 bits of element i of `words`: float32 words (Raw = uint32_t, also decoded values)
/// or BF16 words (Raw = uint16_t, the top halves). Inlined into each caller's instruction set.
template <typename Raw>
[[gnu::always_inline]] inline uint32_t float_bits(const std::byte* words, uint64_t i) {
  Raw r;
  std::memcpy(&r, words + i * sizeof(Raw), sizeof r);
  return sizeof(Raw) == 2 ? static_cast<uint32_t>(r) << 16 : static_cast<uint32_t>(r);
}

/// Element i of `words` as a float (Raw as for float_bits).
template <typename Raw>
[[gnu::always_inline]] inline float value_at(const std::byte* words, uint64_t i) {
  return std::bit_cast<float>(float_bits<Raw>(words, i));
}

/// Element i of float32 words, or of BF16 words when `bf16`.
inline float word_value(const std::byte* words, uint64_t i, bool bf16) {
  return bf16 ? value_at<uint16_t>(words, i) : value_at<uint32_t>(words, i);
}

}  // namespace tensormorph::cpu
