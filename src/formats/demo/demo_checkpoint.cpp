#include "formats/demo/demo_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "core/quantize/quantize.h"
#include "formats/gguf/gguf.h"
#include "formats/safetensors/safetensors.h"

namespace tensormorph::demo {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kVocab = 4096, kDim = 384, kHidden = 1024, kLayers = 4;
constexpr uint64_t kSeed = 20261129;

// Deterministic on every platform: mt19937_64 is fully specified; the transforms below are ours.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double uniform() { return (static_cast<double>(gen_() >> 11) + 1.0) * 0x1.0p-53; }  // (0, 1]
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform()); }
  double student_t3() {
    double z = normal(), a = normal(), b = normal(), c = normal();
    return z / std::sqrt((a * a + b * b + c * c) / 3.0);
  }

 private:
  std::mt19937_64 gen_;
};

// One demo tensor in float32 before it is stored.
struct DemoTensor {
  std::string hf_name;    // safetensors (Hugging Face style) name
  std::string gguf_name;  // llama.cpp style name
  std::vector<uint64_t> shape;
  std::vector<float> values;
  DType st_dtype;    // dtype in the safetensors shards
  DType gguf_dtype;  // dtype in the GGUF twin
  int shard;         // 0 or 1
  bool regroup_rows = false;  // q_proj / k_proj: the converter regroups their rows per head
};

constexpr uint32_t kHeads = 6;

// The GGUF twin's order of a q/k projection's rows (GGUF row g holds Hugging Face row
// gguf_row_source(g)), so that comparing the twin with the set undoes it exactly.
std::vector<float> converter_rows(const DemoTensor& t) {
  const uint64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> out(t.values.size());
  for (uint64_t g = 0; g < rows; ++g) {
    const uint64_t hf = gguf::gguf_row_source(g, rows, kHeads);
    std::copy_n(t.values.begin() + static_cast<ptrdiff_t>(hf * cols), cols, out.begin() + static_cast<ptrdiff_t>(g * cols));
  }
  return out;
}

std::vector<float> gaussian_matrix(Rng& rng, uint64_t rows, uint64_t cols, double scale) {
  std::vector<float> v(rows * cols);
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

// Heavy tails: Student-t(3) bulk instead of Gaussian.
std::vector<float> heavy_tailed_matrix(Rng& rng, uint64_t rows, uint64_t cols, double scale) {
  std::vector<float> v(rows * cols);
  for (auto& x : v) x = static_cast<float>(scale * rng.student_t3());
  return v;
}

// Outlier input channels: a few columns scaled up, as seen in real LLM activations' weights.
void add_outlier_columns(std::vector<float>& v, uint64_t cols, std::initializer_list<uint64_t> which, float factor) {
  for (size_t i = 0; i < v.size(); ++i) {
    for (uint64_t c : which) {
      if (i % cols == c) v[i] *= factor;
    }
  }
}

// A rank-2 component on top of the noise, visible as stripes in a heatmap and as spectral spikes.
void add_low_rank(Rng& rng, std::vector<float>& v, uint64_t rows, uint64_t cols, double strength) {
  for (int r = 0; r < 2; ++r) {
    std::vector<double> u(rows), w(cols);
    for (auto& x : u) x = rng.normal();
    for (auto& x : w) x = rng.normal();
    for (uint64_t i = 0; i < rows; ++i) {
      for (uint64_t j = 0; j < cols; ++j) v[i * cols + j] += static_cast<float>(strength * u[i] * w[j] / (r + 1));
    }
  }
}

std::vector<float> norm_vector(Rng& rng, uint64_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(1.0 + 0.05 * rng.normal());
  return v;
}

std::vector<DemoTensor> build_model() {
  Rng rng(kSeed);
  std::vector<DemoTensor> t;
  t.push_back({"model.embed_tokens.weight", "token_embd.weight", {kVocab, kDim},
               gaussian_matrix(rng, kVocab, kDim, 0.02), DType::kBF16, DType::kQ8_0, 0});
  for (uint64_t l = 0; l < kLayers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".";
    const std::string gg = "blk." + std::to_string(l) + ".";
    const int shard = l < kLayers / 2 ? 0 : 1;
    t.push_back({hf + "input_layernorm.weight", gg + "attn_norm.weight", {kDim}, norm_vector(rng, kDim),
                 DType::kF32, DType::kF32, shard});
    for (const char* proj : {"q", "k", "v", "o"}) {
      auto w = gaussian_matrix(rng, kDim, kDim, 0.02);
      if (proj[0] == 'q' || proj[0] == 'k') add_outlier_columns(w, kDim, {17, 200}, 12.0f);
      if (proj[0] == 'q' && l == 1) add_low_rank(rng, w, kDim, kDim, 0.01);
      const std::string gguf_role = proj[0] == 'o' ? "attn_output" : std::string("attn_") + proj;  // llama.cpp's names
      t.push_back({hf + "self_attn." + proj + "_proj.weight", gg + gguf_role + ".weight", {kDim, kDim},
                   std::move(w), DType::kBF16, proj[0] == 'v' ? DType::kQ8_0 : DType::kQ4_0, shard,
                   proj[0] == 'q' || proj[0] == 'k'});
    }
    t.push_back({hf + "post_attention_layernorm.weight", gg + "ffn_norm.weight", {kDim}, norm_vector(rng, kDim),
                 DType::kF32, DType::kF32, shard});
    t.push_back({hf + "mlp.gate_proj.weight", gg + "ffn_gate.weight", {kHidden, kDim},
                 gaussian_matrix(rng, kHidden, kDim, 0.02), DType::kBF16, DType::kQ4_0, shard});
    t.push_back({hf + "mlp.up_proj.weight", gg + "ffn_up.weight", {kHidden, kDim},
                 heavy_tailed_matrix(rng, kHidden, kDim, 0.015), DType::kBF16, DType::kQ4_0, shard});
    auto down = gaussian_matrix(rng, kDim, kHidden, 0.02);
    if (l == 2) {
      // Planted on purpose: the viewer and `stats` must count these, not fold them into min/max/mean.
      down[7 * kHidden + 11] = std::numeric_limits<float>::quiet_NaN();
      down[100 * kHidden + 200] = std::numeric_limits<float>::infinity();
    }
    t.push_back({hf + "mlp.down_proj.weight", gg + "ffn_down.weight", {kDim, kHidden}, std::move(down),
                 DType::kBF16, DType::kQ8_0, shard});
  }
  t.push_back({"model.norm.weight", "output_norm.weight", {kDim}, norm_vector(rng, kDim), DType::kF32, DType::kF32, 1});
  return t;
}

Status write_text_atomically(const fs::path& path, const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp-tensormorph";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) return Status::IoError(tmp.string() + ": cannot write");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::IoError(path.string() + ": cannot rename: " + ec.message());
  return Status::Ok();
}

}  // namespace

Result<DemoFiles> write_demo_checkpoint(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError(dir.string() + ": cannot create directory: " + ec.message());
  const std::vector<DemoTensor> model = build_model();

  // Encode everything first so both formats are written from the same values. The GGUF twin is
  // what llama.cpp's converter makes of the safetensors set: q/k rows regrouped per head.
  std::vector<std::vector<std::byte>> st_bytes, gguf_bytes;
  for (const DemoTensor& t : model) {
    TM_ASSIGN_OR_RETURN(auto a, encode_from_f32(t.st_dtype, t.values));
    TM_ASSIGN_OR_RETURN(auto b, encode_from_f32(t.gguf_dtype, t.regroup_rows ? converter_rows(t) : t.values));
    st_bytes.push_back(std::move(a));
    gguf_bytes.push_back(std::move(b));
  }

  DemoFiles files;
  files.index = dir / "model.safetensors.index.json";
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total_size = 0;
  for (int shard = 0; shard < 2; ++shard) {
    const std::string name = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
    std::vector<safetensors::TensorToWrite> tensors;
    for (size_t i = 0; i < model.size(); ++i) {
      if (model[i].shard != shard) continue;
      tensors.push_back({model[i].hf_name, model[i].st_dtype, model[i].shape, st_bytes[i]});
      weight_map[model[i].hf_name] = name;
      total_size += st_bytes[i].size();
    }
    const std::pair<std::string, std::string> meta[] = {{"format", "pt"}, {"producer", "tensormorph demo"}};
    files.shards.push_back(dir / name);
    TM_RETURN_IF_ERROR(safetensors::write_file(dir / name, tensors, meta));
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  TM_RETURN_IF_ERROR(write_text_atomically(files.index, index.dump(2) + "\n"));

  files.gguf = dir / "demo-mixed-quant.gguf";
  std::vector<gguf::KeyValueToWrite> kvs = {
      {"general.architecture", "string", "llama"},
      {"general.name", "string", "tensormorph-demo"},
      {"llama.block_count", "u32", kLayers},
      {"llama.embedding_length", "u32", kDim},
      {"llama.feed_forward_length", "u32", kHidden},
      {"llama.attention.head_count", "u32", kHeads},
      {"llama.context_length", "u32", 2048},
      {"tensormorph.demo.seed", "u64", kSeed},
  };
  std::vector<gguf::TensorToWrite> gtensors;
  for (size_t i = 0; i < model.size(); ++i) {
    gtensors.push_back({model[i].gguf_name, model[i].gguf_dtype, model[i].shape, gguf_bytes[i]});
  }
  TM_RETURN_IF_ERROR(gguf::write_file(files.gguf, kvs, gtensors, 32));
  return files;
}

}  // namespace tensormorph::demo
