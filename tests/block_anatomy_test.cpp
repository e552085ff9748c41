// block_anatomy: every value formed from a block's reported fields equals the decoder's, bit for
// bit, on ggml's own blocks (gguf-ref/quantized.gguf: one 64 x 512 tensor per type).
#include "core/decode/block_anatomy.h"

#include <bit>
#include <cmath>

#include <gtest/gtest.h>

#include "tensormorph/decode.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

std::unique_ptr<Checkpoint> open_reference() {
  auto c = open_checkpoint(testing::testdata_dir() / "gguf-ref" / "quantized.gguf");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? std::move(c).value() : nullptr;
}

std::span<const std::byte> stored_bytes(const Checkpoint& c, const TensorInfo& t) {
  auto bytes = c.tensor_bytes(t);
  EXPECT_TRUE(bytes.ok());
  return bytes.ok() ? *bytes : std::span<const std::byte>{};
}

TEST(BlockAnatomy, ValuesFromTheFieldsEqualTheDecoderForEveryDescribedType) {
  auto c = open_reference();
  ASSERT_NE(c, nullptr);
  int described = 0;
  for (const TensorInfo& t : c->tensors()) {
    const DTypeInfo& info = dtype_info(t.dtype);
    if (!info.is_quantized || !dtype_decodable(t.dtype)) continue;
    const auto bytes = stored_bytes(*c, t);
    const uint64_t blocks = bytes.size() / info.block_bytes;
    std::vector<float> decoded(blocks * info.block_elems);
    ASSERT_TRUE(decode_to_f32(t.dtype, bytes, decoded.size(), decoded.data()).ok());
    auto first = block_anatomy(t.dtype, bytes.subspan(0, info.block_bytes));
    ASSERT_TRUE(first.ok()) << t.name;
    if (!first->described) {
      EXPECT_FALSE(first->note.empty()) << t.name;
      continue;
    }
    ++described;
    uint64_t mismatches = 0;
    for (uint64_t b = 0; b < blocks; ++b) {
      auto a = block_anatomy(t.dtype, bytes.subspan(b * info.block_bytes, info.block_bytes));
      ASSERT_TRUE(a.ok());
      ASSERT_EQ(a->quants.size(), info.block_elems);
      uint32_t covered = 0;
      for (const auto& s : a->sub_blocks) {
        EXPECT_EQ(s.first, covered);
        covered += s.count;
      }
      EXPECT_EQ(covered, info.block_elems);
      for (uint32_t i = 0; i < info.block_elems; ++i) {
        const float want = decoded[b * info.block_elems + i];
        mismatches += std::bit_cast<uint32_t>(block_anatomy_value(*a, i)) != std::bit_cast<uint32_t>(want);
      }
    }
    EXPECT_EQ(mismatches, 0u) << t.name;
  }
  // Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS.
  EXPECT_EQ(described, 12);
}

TEST(BlockAnatomy, Q4KBlockRecomputedByHandFromScalesMinsAndNibbles) {
  auto c = open_reference();
  ASSERT_NE(c, nullptr);
  const TensorInfo* t = c->find("ref.Q4_K");
  ASSERT_NE(t, nullptr);
  const auto bytes = stored_bytes(*c, *t);
  const uint64_t block = 5;  // row 0, elements 1280..1535
  const auto raw = bytes.subspan(block * 144, 144);
  auto a = block_anatomy(DType::kQ4_K, raw);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(a->d && a->dmin);
  ASSERT_EQ(a->sub_blocks.size(), 8u);
  EXPECT_EQ(*a->d, f16_to_f32(static_cast<uint16_t>(std::to_integer<uint16_t>(raw[0]) | std::to_integer<uint16_t>(raw[1]) << 8)));
  std::vector<float> decoded(256);
  ASSERT_TRUE(decode_to_f32(DType::kQ4_K, raw, 256, decoded.data()).ok());
  for (uint32_t j = 0; j < 8; ++j) {
    const auto& s = a->sub_blocks[j];
    ASSERT_TRUE(s.min_q.has_value());
    EXPECT_GE(s.scale_q, 0);
    EXPECT_LT(s.scale_q, 64);
    EXPECT_LT(*s.min_q, 64);
    for (uint32_t l = 0; l < 32; ++l) {
      // The nibble straight from qs: sub-block j uses the low (even j) or high (odd j) nibbles of
      // qs[32 (j / 2) + l].
      const uint8_t byte = std::to_integer<uint8_t>(raw[16 + 32 * (j / 2) + l]);
      const int nibble = j % 2 == 0 ? byte & 0xf : byte >> 4;
      EXPECT_EQ(a->quants[32 * j + l], nibble);
      const float value = (*a->d * static_cast<float>(s.scale_q)) * static_cast<float>(nibble) -
                          *a->dmin * static_cast<float>(*s.min_q);
      EXPECT_EQ(std::bit_cast<uint32_t>(value), std::bit_cast<uint32_t>(decoded[32 * j + l])) << j << "," << l;
    }
  }
}

TEST(BlockAnatomy, OtherTypesSayWhatIsNotDescribed) {
  std::vector<std::byte> tq2(66, std::byte{0});
  tq2[64] = std::byte{0x00};
  tq2[65] = std::byte{0x3c};  // d = 1.0
  auto a = block_anatomy(DType::kTQ2_0, tq2);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->described);
  EXPECT_EQ(a->d.value_or(0), 1.0f);
  EXPECT_FALSE(block_anatomy(DType::kF32, std::vector<std::byte>(4)).ok());
  EXPECT_FALSE(block_anatomy(DType::kQ4_0, std::vector<std::byte>(17)).ok());
}

}  // namespace
}  // namespace tensormorph
