// Comparing checkpoints end to end: a GGUF written the way llama.cpp's converter writes it (renamed
// tensors, Q/K rows regrouped, Gemma's norm +1) compares as exactly equal to its safetensors
// original; planted differences are found at their coordinates in A's layout; quantization error
// against the real stories260K fixture equals an independent float64 computation; the CLI's gate
// exits with its documented code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/quantize/quantize.h"
#include "engine/checkpoint_diff.h"
#include "engine/compute_session.h"
#include "engine/matrix_shape.h"
#include "engine/quantization_error.h"
#include "formats/gguf/gguf.h"
#include "formats/safetensors/safetensors.h"
#include "index/pair_index.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 0.05f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) { return std::as_bytes(std::span(v)); }

/// Rows regrouped as convert_hf_to_gguf's permute does: GGUF row g holds HF row gguf_row_source(g).
std::vector<float> permute_rows(const std::vector<float>& hf, uint64_t rows, uint64_t cols, uint32_t heads) {
  std::vector<float> out(hf.size());
  for (uint64_t g = 0; g < rows; ++g) {
    const uint64_t src = engine::gguf_row_source(g, rows, heads);
    std::copy_n(hf.begin() + src * cols, cols, out.begin() + g * cols);
  }
  return out;
}

struct ConverterPair {
  testing::TempDir dir;
  std::filesystem::path hf, gguf;
  std::vector<float> q, k, embed, norm;  // the Hugging Face values
  uint64_t dim = 64, kv_dim = 32, vocab = 48;
};

/// A llama-style checkpoint and its GGUF conversion (`arch` "llama" or "gemma"), with `plant`
/// applied to the GGUF's Q weight (in GGUF layout) before it is written.
std::unique_ptr<ConverterPair> write_pair(const std::string& arch, const std::function<void(std::vector<float>&)>& plant = {}) {
  auto p = std::make_unique<ConverterPair>();
  p->q = random_values(p->dim * p->dim, 1);
  p->k = random_values(p->kv_dim * p->dim, 2);
  p->embed = random_values(p->vocab * p->dim, 3);
  p->norm = random_values(p->dim, 4, 0.3f);
  // The embedding is BF16 in the original and F32 in the GGUF (decoded values compare).
  std::vector<uint16_t> embed_bf16(p->embed.size());
  for (size_t i = 0; i < embed_bf16.size(); ++i) embed_bf16[i] = f32_to_bf16(p->embed[i]);
  std::vector<float> embed_f32(p->embed.size());
  for (size_t i = 0; i < embed_f32.size(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(embed_bf16[i]) << 16;
    std::memcpy(&embed_f32[i], &bits, 4);
  }
  p->hf = p->dir / "model.safetensors";
  const std::vector<safetensors::TensorToWrite> hf = {
      {"model.embed_tokens.weight", DType::kBF16, {p->vocab, p->dim}, std::as_bytes(std::span(embed_bf16))},
      {"model.layers.0.self_attn.q_proj.weight", DType::kF32, {p->dim, p->dim}, bytes_of(p->q)},
      {"model.layers.0.self_attn.k_proj.weight", DType::kF32, {p->kv_dim, p->dim}, bytes_of(p->k)},
      {"model.layers.0.input_layernorm.weight", DType::kF32, {p->dim}, bytes_of(p->norm)},
      {"model.layers.0.extra.weight", DType::kF32, {p->dim}, bytes_of(p->norm)}};
  EXPECT_TRUE(safetensors::write_file(p->hf, hf, {}).ok());

  const bool gemma = arch == "gemma";
  std::vector<float> q = gemma ? p->q : permute_rows(p->q, p->dim, p->dim, 4);
  std::vector<float> k = gemma ? p->k : permute_rows(p->k, p->kv_dim, p->dim, 2);
  std::vector<float> norm = p->norm;
  if (gemma) {
    for (auto& x : norm) x = x + 1.0f;
  }
  if (plant) plant(q);
  p->gguf = p->dir / "model.gguf";
  const std::vector<gguf::KeyValueToWrite> kvs = {{"general.architecture", "string", arch},
                                                   {arch + ".attention.head_count", "u32", 4},
                                                   {arch + ".attention.head_count_kv", "u32", 2}};
  const std::vector<gguf::TensorToWrite> tensors = {
      {"token_embd.weight", DType::kF32, {p->vocab, p->dim}, bytes_of(embed_f32)},
      {"blk.0.attn_q.weight", DType::kF32, {p->dim, p->dim}, bytes_of(q)},
      {"blk.0.attn_k.weight", DType::kF32, {p->kv_dim, p->dim}, bytes_of(k)},
      {"blk.0.attn_norm.weight", DType::kF32, {p->dim}, bytes_of(norm)},
      {"rope_freqs.weight", DType::kF32, {p->dim}, bytes_of(p->norm)}};
  EXPECT_TRUE(gguf::write_file(p->gguf, kvs, tensors).ok());
  return p;
}

struct Opened {
  std::unique_ptr<Checkpoint> a, b;
  engine::TensorMatching matching;
};

Opened open_pair(const std::filesystem::path& a, const std::filesystem::path& b) {
  Opened o;
  auto ca = open_checkpoint(a);
  auto cb = open_checkpoint(b);
  EXPECT_TRUE(ca.ok() && cb.ok());
  o.a = std::move(ca).value();
  o.b = std::move(cb).value();
  auto m = engine::match_tensors(*o.a, *o.b);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  o.matching = std::move(m).value();
  return o;
}

std::unique_ptr<engine::ComputeSession> cpu_session() {
  auto s = engine::open_default_session("only=cpu");
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

TEST(CheckpointDiff, AFaithfulConversionComparesAsExactlyEqualInBothDirections) {
  auto session = cpu_session();
  for (const std::string arch : {"llama", "gemma"}) {
    auto pair = write_pair(arch);
    for (const bool hf_first : {true, false}) {
      Opened o = hf_first ? open_pair(pair->hf, pair->gguf) : open_pair(pair->gguf, pair->hf);
      ASSERT_EQ(o.matching.matched.size(), 4u) << arch;
      EXPECT_EQ((hf_first ? o.matching.only_a : o.matching.only_b).size(), 1u);
      EXPECT_EQ((hf_first ? o.matching.only_b : o.matching.only_a).size(), 1u);
      for (const auto& m : o.matching.matched) {
        auto stats = engine::compare_tensors(session->scheduler(), *o.a, *o.b, m);
        ASSERT_TRUE(stats.ok()) << stats.status().to_string();
        EXPECT_EQ(stats->bits_differing, 0u) << arch << " " << m.a->name << " (" << m.transform.describe() << ")";
        EXPECT_EQ(stats->differing, 0u) << m.a->name;
        EXPECT_EQ(stats->pairs, m.a->elements());
        EXPECT_EQ(stats->sum_sq_diff, 0.0);
        const auto metrics = ops::diff_metrics(*stats);
        EXPECT_TRUE(metrics.identical);
        EXPECT_EQ(metrics.rmse, 0.0);
      }
    }
  }
}

TEST(CheckpointDiff, PlantedDifferencesAreFoundWhereTheyAreInAsLayout) {
  auto session = cpu_session();
  const uint64_t g_row = 5, col = 17;  // GGUF row 5 holds HF row gguf_row_source(5)
  auto pair = write_pair("llama", [&](std::vector<float>& q) {
    q[g_row * 64 + col] += 0.75f;
    q[40 * 64 + 3] = NAN;
  });
  const uint64_t hf_row = engine::gguf_row_source(g_row, 64, 4);
  ASSERT_NE(hf_row, g_row);
  for (const bool hf_first : {true, false}) {
    Opened o = hf_first ? open_pair(pair->hf, pair->gguf) : open_pair(pair->gguf, pair->hf);
    const auto it = std::find_if(o.matching.matched.begin(), o.matching.matched.end(), [](const auto& m) {
      return m.a->name == "blk.0.attn_q.weight" || m.a->name == "model.layers.0.self_attn.q_proj.weight";
    });
    ASSERT_NE(it, o.matching.matched.end());
    auto stats = engine::compare_tensors(session->scheduler(), *o.a, *o.b, *it);
    ASSERT_TRUE(stats.ok()) << stats.status().to_string();
    EXPECT_EQ(stats->differing, 2u);  // the changed value and the NaN's class mismatch
    EXPECT_EQ(stats->class_mismatch, 1u);
    EXPECT_EQ(hf_first ? stats->nan_b : stats->nan_a, 1u);
    const uint64_t row = hf_first ? hf_row : g_row;
    EXPECT_EQ(stats->max_abs_index, row * 64 + col);
    const float hf_value = pair->q[hf_row * 64 + col];
    const float gguf_value = hf_value + 0.75f;
    EXPECT_EQ(stats->a_at_max, hf_first ? hf_value : gguf_value);
    EXPECT_EQ(stats->b_at_max, hf_first ? gguf_value : hf_value);
    EXPECT_NEAR(stats->max_abs_diff, 0.75, 1e-6);

    // The difference itself, in A's layout: zero everywhere but the two planted places.
    auto diff = engine::difference_rows(session->scheduler(), *o.a, *o.b, *it, 0, 64);
    ASSERT_TRUE(diff.ok()) << diff.status().to_string();
    size_t nonzero = 0;
    for (size_t i = 0; i < diff->size(); ++i) nonzero += (*diff)[i] != 0.0f || std::isnan((*diff)[i]);
    EXPECT_EQ(nonzero, 2u);
    EXPECT_EQ((*diff)[row * 64 + col], hf_first ? hf_value - gguf_value : gguf_value - hf_value);

    // The difference pyramid's level 0 holds the same: one tile with the change, one with the NaN.
    auto level = engine::difference_tile_stats(session->scheduler(), *o.a, *o.b, *it, 16);
    ASSERT_TRUE(level.ok()) << level.status().to_string();
    ASSERT_EQ(level->tiles.size(), 16u);
    const auto& tile = level->tiles[(row / 16) * 4 + col / 16];
    EXPECT_FLOAT_EQ(tile.absmax, std::fabs(hf_value - gguf_value));
    uint64_t nans = 0;
    for (const auto& t : level->tiles) nans += t.nan;
    EXPECT_EQ(nans, 1u);
  }
}

TEST(PairIndex, DifferencePyramidsAreKeptUntilEitherSideChanges) {
  auto session = cpu_session();
  auto pair = write_pair("llama", [](std::vector<float>& q) { q[7] = 3.0f; });
  auto stored_pyramid = [&](bool* was_stored) -> std::vector<engine::PyramidLevel> {
    Opened o = open_pair(pair->hf, pair->gguf);
    auto index = index::PairIndex::open(*o.a, *o.b);
    EXPECT_TRUE(index.ok()) << index.status().to_string();
    const auto& m = o.matching.matched[1];  // q_proj
    EXPECT_EQ(m.a->name, "model.layers.0.self_attn.q_proj.weight");
    auto levels = index::kept_difference_pyramid(*index, false, session->scheduler(), *o.a, *o.b, m, nullptr, 0, was_stored);
    EXPECT_TRUE(levels.ok()) << levels.status().to_string();
    EXPECT_TRUE(index->save().ok());
    return levels.ok() ? *levels : std::vector<engine::PyramidLevel>{};
  };
  bool was_stored = true;
  const auto first = stored_pyramid(&was_stored);
  EXPECT_FALSE(was_stored);
  ASSERT_FALSE(first.empty());
  const TM_TileStats& top = first.back().tiles[0];
  EXPECT_EQ(top.count, 64u * 64u);
  EXPECT_GT(top.absmax, 2.9f);
  const auto again = stored_pyramid(&was_stored);
  EXPECT_TRUE(was_stored);
  ASSERT_EQ(again.size(), first.size());
  EXPECT_EQ(std::memcmp(&again.back().tiles[0], &top, sizeof top), 0);
  // A changed B (rewritten with other contents) makes the pair index stale.
  std::filesystem::remove(pair->gguf);
  auto other = write_pair("llama");
  std::filesystem::copy_file(other->gguf, pair->gguf);
  const auto rebuilt = stored_pyramid(&was_stored);
  EXPECT_FALSE(was_stored);
  ASSERT_FALSE(rebuilt.empty());
  EXPECT_EQ(rebuilt.back().tiles[0].absmax, 0.0f);
}

/// numpy's inverted_cdf quantile of sorted values.
double inverted_cdf(const std::vector<double>& sorted, double q) {
  const double index = static_cast<double>(sorted.size()) * q - 1.0;
  const double previous = std::floor(index);
  const double rank = index - previous > 0 ? previous + 1 : previous;
  return sorted[rank <= 0 ? 0 : std::min<size_t>(static_cast<size_t>(rank), sorted.size() - 1)];
}

TEST(QuantizationError, Stories260KQ4KMAgainstItsF32OriginalEqualsFloat64Figures) {
  auto session = cpu_session();
  const auto real = testing::testdata_dir() / "real" / "stories260K.gguf";
  const auto quant = testing::testdata_dir() / "gguf-ref" / "stories260K-Q4_K_M.gguf";
  const auto deq = testing::testdata_dir() / "gguf-ref" / "stories260K-Q4_K_M.dequantized.safetensors";
  Opened o = open_pair(quant, real);
  auto expected_ckpt = open_checkpoint(deq);
  ASSERT_TRUE(expected_ckpt.ok());
  size_t measured = 0;
  for (const auto& m : o.matching.matched) {
    if (!engine::is_ggml_quantized(m.a->dtype)) continue;
    engine::QuantizationErrorOptions options;
    options.rows = true;
    options.blocks = true;
    auto e = engine::measured_quantization_error(session->scheduler(), *o.a, *o.b, m, options);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    // Independent: ggml's own decoded values (the fixture) minus the F32 original, in float64.
    const TensorInfo* deq_t = (*expected_ckpt)->find(m.a->name);
    ASSERT_NE(deq_t, nullptr);
    auto deq_bytes = (*expected_ckpt)->tensor_bytes(*deq_t);
    auto ref_bytes = o.b->tensor_bytes(*m.b);
    ASSERT_TRUE(deq_bytes.ok() && ref_bytes.ok());
    const size_t n = m.a->elements();
    const float* qv = reinterpret_cast<const float*>(deq_bytes->data());
    const float* rv = reinterpret_cast<const float*>(ref_bytes->data());
    double sum_sq = 0, ref_sq = 0, max_abs = 0;
    std::vector<double> abs_err(n);
    for (size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(qv[i]) - static_cast<double>(rv[i]);
      sum_sq += d * d;
      ref_sq += static_cast<double>(rv[i]) * rv[i];
      max_abs = std::max(max_abs, std::fabs(d));
      abs_err[i] = std::fabs(static_cast<double>(qv[i] - rv[i]));  // |e| as float32, as the operation ranks it
    }
    std::sort(abs_err.begin(), abs_err.end());
    EXPECT_NEAR(e->metrics.rmse, std::sqrt(sum_sq / static_cast<double>(n)), 1e-12 * std::sqrt(sum_sq / static_cast<double>(n)) + 1e-15) << m.a->name;
    EXPECT_NEAR(e->metrics.rel_frobenius, std::sqrt(sum_sq / ref_sq), 1e-9) << m.a->name;
    EXPECT_EQ(e->metrics.max_abs_diff, max_abs) << m.a->name;
    EXPECT_EQ(e->p95_abs, inverted_cdf(abs_err, 0.95)) << m.a->name;
    EXPECT_EQ(e->p99_abs, inverted_cdf(abs_err, 0.99)) << m.a->name;
    EXPECT_EQ(e->p50_abs, inverted_cdf(abs_err, 0.5)) << m.a->name;
    uint64_t counted = 0;
    for (const uint64_t c : e->histogram) counted += c;
    EXPECT_EQ(counted, n);
    const auto shape = engine::as_matrix(*m.a);
    ASSERT_EQ(e->rows.size(), shape.rows);
    ASSERT_EQ(e->blocks.size(), n / e->block_elements);
    // Block 0's error statistics, by hand.
    double block_sq = 0;
    for (size_t i = 0; i < e->block_elements; ++i) {
      const double d = static_cast<double>(qv[i] - rv[i]);
      block_sq += d * d;
    }
    EXPECT_NEAR(e->blocks[0].sum_sq, block_sq, 1e-12 * block_sq + 1e-20);
    ++measured;
  }
  EXPECT_EQ(measured, 32u);  // 29 Q5_0 and 3 Q8_0 (the F16 ones are not ggml-quantized)
}

TEST(QuantizationError, WhatIfEqualsTheErrorOfGgmlsOwnBlocks) {
  auto session = cpu_session();
  const auto dir = testing::testdata_dir() / "gguf-ref";
  auto source = open_checkpoint(dir / "dequantized.safetensors");
  auto quantized = open_checkpoint(dir / "quantized.gguf");
  ASSERT_TRUE(source.ok() && quantized.ok());
  const TensorInfo* src = (*source)->find("source");
  ASSERT_NE(src, nullptr);
  for (const DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_1, DType::kQ2_K, DType::kQ4_K, DType::kQ6_K, DType::kIQ4_XS}) {
    ASSERT_TRUE(dtype_encodable(type));
    auto what_if = engine::what_if_quantization_error(session->scheduler(), **source, *src, type, {});
    ASSERT_TRUE(what_if.ok()) << what_if.status().to_string();
    engine::MatchedTensors m;
    m.a = (*quantized)->find("ref." + std::string(dtype_name(type)));
    m.b = src;
    ASSERT_NE(m.a, nullptr);
    auto measured = engine::measured_quantization_error(session->scheduler(), **quantized, **source, m, {});
    ASSERT_TRUE(measured.ok()) << measured.status().to_string();
    EXPECT_EQ(std::memcmp(&what_if->stats, &measured->stats, sizeof(TM_DiffStats)), 0) << dtype_name(type);
    EXPECT_EQ(what_if->p99_abs, measured->p99_abs);
    EXPECT_EQ(what_if->histogram, measured->histogram);
  }
  EXPECT_NE(engine::what_if_obstacle(*src, DType::kIQ2_XXS), "");
}

TEST(DiffCli, TheGateExitsFourAndUsageMistakesExitTwo) {
  auto same = write_pair("llama");
  auto planted = write_pair("llama", [](std::vector<float>& q) { q[100] += 0.5f; });
  auto ok = testing::run_cli({"diff", same->hf.string(), same->gguf.string(), "--fail-above", "max_abs=0"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err << ok.out;
  EXPECT_NE(ok.out.find("4 identical bit for bit"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("only in A: model.layers.0.extra.weight"), std::string::npos) << ok.out;
  auto strict = testing::run_cli({"diff", same->hf.string(), same->gguf.string(), "--fail-on-unmatched"});
  EXPECT_EQ(strict.exit_code, 4) << strict.err;
  auto gate = testing::run_cli({"diff", planted->hf.string(), planted->gguf.string(), "--fail-above", "max_abs=0.1", "--json"});
  EXPECT_EQ(gate.exit_code, 4) << gate.err;
  EXPECT_NE(gate.err.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << gate.err;
  auto j = nlohmann::json::parse(gate.out);
  EXPECT_EQ(j["schema"], "tensormorph.diff/1");
  EXPECT_EQ(j["tensors"][0]["a"], "model.layers.0.self_attn.q_proj.weight");  // most changed first
  EXPECT_EQ(j["gate"]["passed"], false);
  auto bad = testing::run_cli({"diff", same->hf.string(), same->gguf.string(), "--fail-above", "nonsense=1"});
  EXPECT_EQ(bad.exit_code, 2);
  auto missing = testing::run_cli({"diff", same->hf.string(), (same->dir / "nope.gguf").string()});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("nope.gguf"), std::string::npos);
}

TEST(QuantizeErrorCli, WhatIfAndMeasuredModes) {
  const auto dir = testing::testdata_dir() / "gguf-ref";
  auto what_if = testing::run_cli({"quantize-error", (dir / "dequantized.safetensors").string(), "--type", "q8_0,Q4_0",
                                   "--tensor", "source", "--json"});
  ASSERT_EQ(what_if.exit_code, 0) << what_if.err;
  auto j = nlohmann::json::parse(what_if.out);
  ASSERT_EQ(j["tensors"].size(), 2u);
  EXPECT_EQ(j["tensors"][0]["type"], "Q8_0");
  EXPECT_LT(j["tensors"][0]["rmse"].get<double>(), j["tensors"][1]["rmse"].get<double>());
  auto measured = testing::run_cli({"quantize-error", (dir / "stories260K-Q4_K_M.gguf").string(), "--reference",
                                    (testing::testdata_dir() / "real" / "stories260K.gguf").string(), "--fail-above",
                                    "rel_rms=0.01"});
  EXPECT_EQ(measured.exit_code, 4) << measured.err;  // Q5_0 costs about 4%
  EXPECT_NE(measured.out.find("total Q5_0"), std::string::npos) << measured.out;
  auto neither = testing::run_cli({"quantize-error", (dir / "quantized.gguf").string()});
  EXPECT_EQ(neither.exit_code, 2);
  auto bad_type = testing::run_cli({"quantize-error", (dir / "dequantized.safetensors").string(), "--type", "Q9_X"});
  EXPECT_EQ(bad_type.exit_code, 2);
}

}  // namespace
}  // namespace tensormorph
