#include "engine/tensor_matching.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <span>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace tensormorph::engine {
namespace {

/// GGUF block-tensor names and the Hugging Face names within model.layers.N they come from, as
/// convert_hf_to_gguf's tensor map renames them for the architectures below.
struct BlockName {
  std::string_view gguf;
  std::string_view hugging_face;
};

constexpr BlockName kLlamaBlock[] = {
    {"attn_norm", "input_layernorm"},        {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},          {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},     {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},           {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};
// Gemma 2 and 3 norm around both the attention and the MLP, with their own names.
constexpr BlockName kGemma2Block[] = {
    {"attn_norm", "input_layernorm"},          {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},            {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},       {"post_attention_norm", "post_attention_layernorm"},
    {"ffn_norm", "pre_feedforward_layernorm"}, {"post_ffw_norm", "post_feedforward_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},             {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},             {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
};
// Phi-3 fuses Q, K and V, and the gate with the up projection.
constexpr BlockName kPhi3Block[] = {
    {"attn_norm", "input_layernorm"},    {"attn_qkv", "self_attn.qkv_proj"},
    {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
    {"ffn_up", "mlp.gate_up_proj"},      {"ffn_down", "mlp.down_proj"},
};

std::span<const BlockName> block_names(std::string_view architecture) {
  if (architecture == "llama" || architecture == "qwen2" || architecture == "gemma") return kLlamaBlock;
  if (architecture == "gemma2" || architecture == "gemma3") return kGemma2Block;
  if (architecture == "phi3") return kPhi3Block;
  return {};
}

bool is_gemma(std::string_view architecture) { return architecture.starts_with("gemma"); }

/// A GGUF metadata string or unsigned integer.
const MetadataEntry* metadata(const Checkpoint& c, std::string_view key) {
  for (const MetadataEntry& m : c.metadata()) {
    if (m.key == key) return &m;
  }
  return nullptr;
}

std::string architecture_of(const Checkpoint& c) {
  const MetadataEntry* m = metadata(c, "general.architecture");
  return m != nullptr && m->value.is_string() ? m->value.get<std::string>() : std::string();
}

uint32_t metadata_count(const Checkpoint& c, const std::string& key) {
  const MetadataEntry* m = metadata(c, key);
  return m != nullptr && m->value.is_number_unsigned() ? m->value.get<uint32_t>() : 0;
}

/// What the converter did to GGUF tensor `gguf_name` (of shape `shape`) of checkpoint `gguf`.
ConverterTransform transform_of(const Checkpoint& gguf, std::string_view architecture, std::string_view gguf_name,
                                std::span<const uint64_t> shape, int gguf_side) {
  ConverterTransform t;
  t.gguf_side = gguf_side;
  const bool weight = gguf_name.ends_with(".weight");
  if (architecture == "llama" && weight && !shape.empty()) {
    const bool q = gguf_name.ends_with(".attn_q.weight"), k = gguf_name.ends_with(".attn_k.weight");
    if (q || k) {
      const std::string prefix(architecture);
      const uint32_t heads = metadata_count(gguf, prefix + ".attention.head_count");
      const uint32_t kv_heads = metadata_count(gguf, prefix + ".attention.head_count_kv");
      const uint32_t n = q || kv_heads == 0 ? heads : kv_heads;
      if (n != 0 && shape[0] % n == 0 && (shape[0] / n) % 2 == 0) t.permuted_heads = n;
    }
  }
  if (is_gemma(architecture) && gguf_name.ends_with("norm.weight")) t.gguf_offset = 1.0;
  return t;
}

}  // namespace

std::string ConverterTransform::describe() const {
  std::string out;
  if (permuted_heads != 0) {
    out = "rows regrouped in " + std::to_string(permuted_heads) + " heads (llama.cpp's Q/K permutation)";
  }
  if (gguf_offset != 0) {
    if (!out.empty()) out += "; ";
    std::ostringstream s;
    s << (gguf_offset > 0 ? "+" : "") << gguf_offset << " on the GGUF side (Gemma norm)";
    out += s.str();
  }
  return out;
}

std::string hugging_face_name(std::string_view architecture, std::string_view gguf_name) {
  std::string_view suffix;
  std::string_view stem = gguf_name;
  for (std::string_view s : {".weight", ".bias"}) {
    if (stem.ends_with(s)) {
      suffix = s;
      stem.remove_suffix(s.size());
      break;
    }
  }
  const std::span<const BlockName> blocks = block_names(architecture);
  if (blocks.empty() || suffix.empty()) return {};
  const std::string tail(suffix);
  if (stem == "token_embd") return "model.embed_tokens" + tail;
  if (stem == "output_norm") return "model.norm" + tail;
  if (stem == "output") return "lm_head" + tail;
  if (!stem.starts_with("blk.")) return {};
  stem.remove_prefix(4);
  const size_t dot = stem.find('.');
  if (dot == std::string_view::npos || dot == 0) return {};
  uint64_t layer = 0;
  const auto [end, error] = std::from_chars(stem.data(), stem.data() + dot, layer);
  if (error != std::errc() || end != stem.data() + dot) return {};
  const std::string_view part = stem.substr(dot + 1);
  for (const BlockName& b : blocks) {
    if (b.gguf == part) return "model.layers." + std::to_string(layer) + "." + std::string(b.hugging_face) + tail;
  }
  return {};
}

Result<NameMapping> read_name_mapping(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path.string() + ": cannot read the name mapping");
  NameMapping out;
  std::string line;
  for (uint64_t number = 1; std::getline(in, line); ++number) {
    std::istringstream fields(line);
    std::string a, b, extra;
    if (!(fields >> a) || a.starts_with('#')) continue;
    if (!(fields >> b) || (fields >> extra)) {
      return Status::InvalidArgument(path.string() + ":" + std::to_string(number) +
                                     ": expected two tensor names (A's, then B's) separated by whitespace");
    }
    out.emplace_back(std::move(a), std::move(b));
  }
  return out;
}

Result<TensorMatching> match_tensors(const Checkpoint& a, const Checkpoint& b, const NameMapping& user) {
  TensorMatching result;
  std::unordered_set<const TensorInfo*> taken_a, taken_b;
  std::vector<MatchedTensors> pairs;
  for (const auto& [name_a, name_b] : user) {
    const TensorInfo* ta = a.find(name_a);
    const TensorInfo* tb = b.find(name_b);
    if (ta == nullptr || tb == nullptr) {
      return Status::InvalidArgument("name mapping: " + (ta == nullptr ? name_a : name_b) + " is not a tensor of " +
                                     (ta == nullptr ? a.path() : b.path()).string());
    }
    const bool fresh_a = taken_a.insert(ta).second, fresh_b = taken_b.insert(tb).second;
    if (!fresh_a || !fresh_b) {
      return Status::InvalidArgument("name mapping: " + (fresh_a ? name_b : name_a) + " is mapped more than once");
    }
    pairs.push_back({ta, tb, {}, true});
  }
  // Where exactly one side is GGUF, its names go through the converter's renaming.
  const bool a_gguf = a.format() == CheckpointFormat::kGguf, b_gguf = b.format() == CheckpointFormat::kGguf;
  const Checkpoint* gguf = a_gguf != b_gguf ? (a_gguf ? &a : &b) : nullptr;
  const std::string architecture = gguf != nullptr ? architecture_of(*gguf) : std::string();
  const bool renaming = gguf != nullptr && !block_names(architecture).empty();
  result.naming = renaming ? "gguf (" + architecture + ") <-> hugging face" : "same names";
  if (gguf != nullptr && !renaming) {
    result.naming += architecture.empty() ? " (the GGUF names no architecture)"
                                          : " (no renaming known for GGUF architecture " + architecture + ")";
  }
  const Checkpoint& other = gguf == &b ? a : b;  // the side whose names are looked up as they are
  std::unordered_map<std::string, const TensorInfo*> other_by_key;
  for (const TensorInfo& t : other.tensors()) other_by_key.emplace(t.name, &t);
  auto& taken_gguf = gguf == &b ? taken_b : taken_a;
  auto& taken_other = gguf == &b ? taken_a : taken_b;
  const Checkpoint& first = gguf != nullptr ? *gguf : a;
  for (const TensorInfo& t : first.tensors()) {
    if (taken_gguf.count(&t) != 0) continue;
    std::string key = t.name;
    if (renaming) {
      std::string mapped = hugging_face_name(architecture, t.name);
      if (!mapped.empty()) key = std::move(mapped);
    }
    const auto it = other_by_key.find(key);
    if (it == other_by_key.end() || taken_other.count(it->second) != 0) continue;
    taken_gguf.insert(&t);
    taken_other.insert(it->second);
    MatchedTensors m{gguf == &b ? it->second : &t, gguf == &b ? &t : it->second, {}, false};
    if (renaming) m.transform = transform_of(*gguf, architecture, t.name, t.shape, gguf == &a ? 0 : 1);
    pairs.push_back(m);
  }
  // In A's order: the pairs, then what is left on each side.
  std::unordered_map<const TensorInfo*, size_t> order;
  for (size_t i = 0; i < a.tensors().size(); ++i) order.emplace(&a.tensors()[i], i);
  std::sort(pairs.begin(), pairs.end(), [&](const MatchedTensors& x, const MatchedTensors& y) {
    return order.at(x.a) < order.at(y.a);
  });
  for (MatchedTensors& m : pairs) (m.a->shape == m.b->shape ? result.matched : result.shape_mismatched).push_back(m);
  for (const TensorInfo& t : a.tensors()) {
    if (taken_a.count(&t) == 0) result.only_a.push_back(&t);
  }
  for (const TensorInfo& t : b.tensors()) {
    if (taken_b.count(&t) == 0) result.only_b.push_back(&t);
  }
  return result;
}

}  // namespace tensormorph::engine
