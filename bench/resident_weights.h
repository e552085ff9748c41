// The matrices the WebGPU benchmarks measure: weights drawn from N(0, 0.02) as F32, and BF16 of
// the same byte count made by truncating F32 values to their top halves (as a checkpoint converted
// to BF16 holds), so the benchmarks of the shipped kernel and of its variants see the same data.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace tensormorph::bench {

/// `bytes` of F32 weights and `bytes` of BF16 ones (bytes a multiple of 4), seeded identically.
struct ResidentWeights {
  std::vector<uint8_t> f32;
  std::vector<uint8_t> bf16;
};

/// The benchmarks' weights of `bytes` each.
inline ResidentWeights resident_weights(uint64_t bytes) {
  ResidentWeights w{std::vector<uint8_t>(bytes), std::vector<uint8_t>(bytes)};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (uint64_t i = 0; i < bytes / 4; ++i) {
    const float v = normal(rng);
    std::memcpy(&w.f32[4 * i], &v, 4);
  }
  for (uint64_t i = 0; i < bytes / 2; ++i) std::memcpy(&w.bf16[2 * i], &w.f32[4 * (i % (bytes / 4)) + 2], 2);
  return w;
}

}  // namespace tensormorph::bench
