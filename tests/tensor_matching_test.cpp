// Matching the tensors of two checkpoints: GGUF names to the Hugging Face names llama.cpp's
// converter took them from, the converter's Q/K row permutation and Gemma's norm offset, and
// everything unmatched reported.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <vector>

#include "engine/tensor_matching.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using engine::match_tensors;

TensorInfo tensor(std::string name, std::vector<uint64_t> shape) {
  TensorInfo t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  return t;
}

Checkpoint checkpoint(CheckpointFormat format, std::vector<TensorInfo> tensors, std::vector<MetadataEntry> metadata = {}) {
  return Checkpoint(format, format == CheckpointFormat::kGguf ? "model.gguf" : "model.safetensors", {}, std::move(tensors),
                    std::move(metadata), {});
}

MetadataEntry entry(std::string key, nlohmann::ordered_json value) { return {std::move(key), "", std::move(value)}; }

TEST(TensorMatching, GgufNamesAreTheConvertersHuggingFaceNames) {
  EXPECT_EQ(engine::hugging_face_name("llama", "token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(engine::hugging_face_name("llama", "output.weight"), "lm_head.weight");
  EXPECT_EQ(engine::hugging_face_name("llama", "output_norm.weight"), "model.norm.weight");
  EXPECT_EQ(engine::hugging_face_name("llama", "blk.17.attn_q.weight"), "model.layers.17.self_attn.q_proj.weight");
  EXPECT_EQ(engine::hugging_face_name("llama", "blk.0.ffn_norm.weight"), "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(engine::hugging_face_name("qwen2", "blk.3.attn_k.bias"), "model.layers.3.self_attn.k_proj.bias");
  EXPECT_EQ(engine::hugging_face_name("gemma2", "blk.1.ffn_norm.weight"), "model.layers.1.pre_feedforward_layernorm.weight");
  EXPECT_EQ(engine::hugging_face_name("gemma2", "blk.1.post_attention_norm.weight"),
            "model.layers.1.post_attention_layernorm.weight");
  EXPECT_EQ(engine::hugging_face_name("gemma3", "blk.2.attn_q_norm.weight"), "model.layers.2.self_attn.q_norm.weight");
  EXPECT_EQ(engine::hugging_face_name("phi3", "blk.5.attn_qkv.weight"), "model.layers.5.self_attn.qkv_proj.weight");
  EXPECT_EQ(engine::hugging_face_name("phi3", "blk.5.ffn_up.weight"), "model.layers.5.mlp.gate_up_proj.weight");
  // Not names the converter writes: no guess.
  EXPECT_EQ(engine::hugging_face_name("llama", "rope_freqs.weight"), "");
  EXPECT_EQ(engine::hugging_face_name("llama", "blk.x.attn_q.weight"), "");
  EXPECT_EQ(engine::hugging_face_name("llama", "blk.1.attn_q"), "");
  EXPECT_EQ(engine::hugging_face_name("mamba", "blk.1.attn_q.weight"), "");
}

TEST(TensorMatching, PermutedRowsComeFromTheRowsTheConverterMoved) {
  // convert_hf_to_gguf: w.reshape(heads, 2, d/2, cols).swapaxes(1, 2).reshape(w.shape), written
  // out index by index: GGUF row (h, i, j) holds Hugging Face row (h, j, i).
  const uint32_t heads = 3;
  const uint64_t d = 8, rows = heads * d;
  std::vector<uint64_t> want(rows);
  for (uint64_t h = 0; h < heads; ++h) {
    for (uint64_t j = 0; j < 2; ++j) {
      for (uint64_t i = 0; i < d / 2; ++i) want[h * d + i * 2 + j] = h * d + j * (d / 2) + i;
    }
  }
  std::set<uint64_t> sources;
  for (uint64_t g = 0; g < rows; ++g) {
    EXPECT_EQ(engine::gguf_row_source(g, rows, heads), want[g]) << "row " << g;
    sources.insert(engine::gguf_row_source(g, rows, heads));
  }
  EXPECT_EQ(sources.size(), rows);
}

TEST(TensorMatching, LlamaGgufAgainstItsSafetensorsReportsEveryTensor) {
  const Checkpoint gguf = checkpoint(CheckpointFormat::kGguf,
                                     {tensor("token_embd.weight", {32, 8}), tensor("rope_freqs.weight", {2}),
                                      tensor("blk.0.attn_q.weight", {8, 8}), tensor("blk.0.attn_k.weight", {4, 8}),
                                      tensor("blk.0.attn_v.weight", {4, 8}), tensor("blk.0.ffn_norm.weight", {8})},
                                     {entry("general.architecture", "llama"), entry("llama.attention.head_count", 4u),
                                      entry("llama.attention.head_count_kv", 2u)});
  const Checkpoint hf = checkpoint(CheckpointFormat::kSafetensors,
                                   {tensor("model.layers.0.self_attn.k_proj.weight", {4, 8}),
                                    tensor("model.layers.0.self_attn.q_proj.weight", {8, 8}),
                                    tensor("model.layers.0.self_attn.v_proj.weight", {4, 9}),
                                    tensor("model.layers.0.post_attention_layernorm.weight", {8}),
                                    tensor("model.embed_tokens.weight", {32, 8}), tensor("lm_head.weight", {32, 8})});
  for (const bool gguf_first : {true, false}) {
    const Checkpoint& a = gguf_first ? gguf : hf;
    const Checkpoint& b = gguf_first ? hf : gguf;
    auto m = match_tensors(a, b);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m->naming, "gguf (llama) <-> hugging face");
    ASSERT_EQ(m->matched.size(), 4u);
    for (const engine::MatchedTensors& p : m->matched) {
      const std::string& g = gguf_first ? p.a->name : p.b->name;
      EXPECT_EQ(p.transform.gguf_side, gguf_first ? 0 : 1);
      EXPECT_EQ(p.transform.gguf_offset, 0.0);
      EXPECT_EQ(p.transform.permuted_heads, g == "blk.0.attn_q.weight" ? 4u : g == "blk.0.attn_k.weight" ? 2u : 0u) << g;
    }
    // In A's order.
    EXPECT_EQ(m->matched[0].a->name, gguf_first ? "token_embd.weight" : "model.layers.0.self_attn.k_proj.weight");
    ASSERT_EQ(m->shape_mismatched.size(), 1u);
    EXPECT_EQ((gguf_first ? m->shape_mismatched[0].a : m->shape_mismatched[0].b)->name, "blk.0.attn_v.weight");
    const auto& only_gguf = gguf_first ? m->only_a : m->only_b;
    const auto& only_hf = gguf_first ? m->only_b : m->only_a;
    ASSERT_EQ(only_gguf.size(), 1u);
    EXPECT_EQ(only_gguf[0]->name, "rope_freqs.weight");
    ASSERT_EQ(only_hf.size(), 1u);
    EXPECT_EQ(only_hf[0]->name, "lm_head.weight");
  }
}

TEST(TensorMatching, GemmaNormsCarryTheConvertersOffsetAndSameFormatsMatchByName) {
  const Checkpoint gguf = checkpoint(CheckpointFormat::kGguf,
                                     {tensor("blk.0.attn_norm.weight", {8}), tensor("blk.0.attn_q.weight", {8, 8})},
                                     {entry("general.architecture", "gemma"), entry("gemma.attention.head_count", 4u)});
  const Checkpoint hf = checkpoint(CheckpointFormat::kSafetensors, {tensor("model.layers.0.input_layernorm.weight", {8}),
                                                                    tensor("model.layers.0.self_attn.q_proj.weight", {8, 8})});
  auto m = match_tensors(hf, gguf);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->matched.size(), 2u);
  EXPECT_EQ(m->matched[0].transform.gguf_offset, 1.0);
  EXPECT_EQ(m->matched[0].transform.describe(), "+1 on the GGUF side (Gemma norm)");
  EXPECT_TRUE(m->matched[1].transform.identity()) << "Gemma's Q is not permuted";
  // Two GGUF files: names as they are, nothing renamed or transformed.
  auto same = match_tensors(gguf, gguf);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->naming, "same names");
  EXPECT_EQ(same->matched.size(), 2u);
  for (const auto& p : same->matched) EXPECT_TRUE(p.transform.identity());
  // A GGUF whose architecture has no known renaming says so, and matches names as they are.
  const Checkpoint unknown = checkpoint(CheckpointFormat::kGguf, {tensor("model.layers.0.input_layernorm.weight", {8})},
                                        {entry("general.architecture", "mamba")});
  auto plain = match_tensors(unknown, hf);
  ASSERT_TRUE(plain.ok());
  EXPECT_NE(plain->naming.find("mamba"), std::string::npos) << plain->naming;
  EXPECT_EQ(plain->matched.size(), 1u);
  EXPECT_EQ(plain->only_b.size(), 1u);
}

TEST(TensorMatching, AUsersMappingComesFirstAndItsMistakesAreNamed) {
  testing::TempDir dir;
  const Checkpoint a = checkpoint(CheckpointFormat::kSafetensors, {tensor("w", {2, 2}), tensor("x", {3})});
  const Checkpoint b = checkpoint(CheckpointFormat::kSafetensors, {tensor("renamed.w", {2, 2}), tensor("x", {3})});
  {
    std::ofstream(dir / "map.txt") << "# A's name, B's name\n\nw   renamed.w\n";
  }
  auto mapping = engine::read_name_mapping(dir / "map.txt");
  ASSERT_TRUE(mapping.ok()) << mapping.status().to_string();
  auto m = match_tensors(a, b, *mapping);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->matched.size(), 2u);
  EXPECT_TRUE(m->matched[0].from_user_map);
  EXPECT_EQ(m->matched[0].b->name, "renamed.w");
  EXPECT_FALSE(m->matched[1].from_user_map);
  EXPECT_TRUE(m->only_a.empty() && m->only_b.empty()) << m->only_a.size() << " " << m->only_b.size() << " "
                                                      << (m->only_a.empty() ? "" : m->only_a[0]->name);

  {
    std::ofstream(dir / "bad.txt") << "w renamed.w\nx y z\n";
  }
  auto bad = engine::read_name_mapping(dir / "bad.txt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("bad.txt:2"), std::string::npos) << bad.status().to_string();
  EXPECT_FALSE(engine::read_name_mapping(dir / "missing.txt").ok());

  auto unknown = match_tensors(a, b, {{"w", "nope"}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().to_string().find("nope"), std::string::npos);
  auto twice = match_tensors(a, b, {{"w", "renamed.w"}, {"w", "x"}});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().to_string().find("more than once"), std::string::npos) << twice.status().to_string();
}

}  // namespace
}  // namespace tensormorph
