#include "engine/model_layout.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <map>
#include <tuple>
#include <unordered_map>

namespace tensormorph::engine {
namespace {

using Parts = std::vector<std::string_view>;

Parts split(std::string_view name) {
  Parts parts;
  size_t begin = 0;
  for (;;) {
    const size_t dot = name.find('.', begin);
    parts.push_back(name.substr(begin, dot == std::string_view::npos ? std::string_view::npos : dot - begin));
    if (dot == std::string_view::npos) return parts;
    begin = dot + 1;
  }
}

std::string join(const Parts& parts, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    if (i > begin) out += '.';
    out += parts[i];
  }
  return out;
}

std::optional<uint64_t> number_of(std::string_view part) {
  if (part.empty() || !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
  if (ec != std::errc() || end != part.data() + part.size()) return std::nullopt;  // too large for a block number
  return v;
}

// The canonical labels in their column order; a role whose label is not here comes after them.
constexpr std::array<std::string_view, 17> kLabelOrder = {
    "attn_norm", "q",        "k",      "v",    "qkv",  "o",    "cross_norm", "cross_q", "cross_k",
    "cross_v",   "cross_o",  "ffn_norm", "router", "gate", "up", "gate_up",  "down"};

// Names that mean one label in every convention that uses them.
const std::unordered_map<std::string_view, std::string_view>& plain_labels() {
  static const std::unordered_map<std::string_view, std::string_view> labels = {
      // Hugging Face llama/mistral/qwen2/gemma, GGUF (llama.cpp), Meta llama, DistilBERT, GPT-J, OPT, CLIP, Falcon.
      {"q_proj", "q"}, {"attn_q", "q"}, {"wq", "q"}, {"q_lin", "q"}, {"query", "q"},
      {"k_proj", "k"}, {"attn_k", "k"}, {"wk", "k"}, {"k_lin", "k"}, {"key", "k"},
      {"v_proj", "v"}, {"attn_v", "v"}, {"wv", "v"}, {"v_lin", "v"}, {"value", "v"},
      {"o_proj", "o"}, {"attn_output", "o"}, {"out_proj", "o"}, {"out_lin", "o"},
      {"qkv_proj", "qkv"}, {"attn_qkv", "qkv"}, {"c_attn", "qkv"}, {"query_key_value", "qkv"}, {"Wqkv", "qkv"},
      {"in_proj", "qkv"},
      {"gate_proj", "gate"}, {"ffn_gate", "gate"}, {"w1", "gate"}, {"wi_0", "gate"},
      {"up_proj", "up"}, {"ffn_up", "up"}, {"w3", "up"}, {"wi_1", "up"}, {"c_fc", "up"}, {"dense_h_to_4h", "up"},
      {"fc_in", "up"}, {"fc1", "up"}, {"lin1", "up"},
      {"down_proj", "down"}, {"ffn_down", "down"}, {"w2", "down"}, {"dense_4h_to_h", "down"}, {"fc_out", "down"},
      {"fc2", "down"}, {"lin2", "down"},
      {"gate_up_proj", "gate_up"}, {"ffn_gate_up", "gate_up"},
      {"input_layernorm", "attn_norm"}, {"attn_norm", "attn_norm"}, {"ln_1", "attn_norm"},
      {"attention_norm", "attn_norm"}, {"self_attn_layer_norm", "attn_norm"}, {"layernorm_before", "attn_norm"},
      {"layer_norm1", "attn_norm"}, {"ln_attn", "attn_norm"}, {"sa_layer_norm", "attn_norm"},
      {"post_attention_layernorm", "ffn_norm"}, {"ffn_norm", "ffn_norm"}, {"ln_2", "ffn_norm"},
      {"final_layer_norm", "ffn_norm"}, {"layernorm_after", "ffn_norm"}, {"layer_norm2", "ffn_norm"},
      {"ln_mlp", "ffn_norm"}, {"pre_feedforward_layernorm", "ffn_norm"}, {"output_layer_norm", "ffn_norm"},
      {"encoder_attn_layer_norm", "cross_norm"},
      {"ffn_gate_inp", "router"},
  };
  return labels;
}

bool is_attention(std::string_view part) {
  return part == "attn" || part == "self_attn" || part == "attention" || part == "self_attention" ||
         part == "SelfAttention" || part == "self";
}

bool is_cross_attention(std::string_view part) {
  return part == "encoder_attn" || part == "EncDecAttention" || part == "crossattention" || part == "cross_attn";
}

bool is_any_attention(std::string_view part) { return is_attention(part) || is_cross_attention(part); }

// The label of part i of a role's body, from the parts before it where one name means different
// things (GPT-2's c_proj, BERT's dense and LayerNorm, T5's wo and layer_norm); "" when none.
std::string_view label_at(const Parts& p, size_t i, bool decoder) {
  const std::string_view x = p[i];
  const std::string_view prev = i >= 1 ? p[i - 1] : std::string_view(), prev2 = i >= 2 ? p[i - 2] : std::string_view();
  if (x == "q" || x == "k" || x == "v" || x == "o") return is_any_attention(prev) ? x : std::string_view();
  if (x == "wo") return prev == "DenseReluDense" ? "down" : is_any_attention(prev) ? "o" : std::string_view();
  if (x == "wi") return prev == "DenseReluDense" ? "up" : std::string_view();
  if (x == "c_proj") return prev == "mlp" ? "down" : "o";
  if (x == "dense") {
    if (prev == "output") return is_any_attention(prev2) ? "o" : "down";
    if (prev == "intermediate") return "up";
    return is_any_attention(prev) ? "o" : std::string_view();
  }
  if (x == "LayerNorm" && prev == "output") return is_any_attention(prev2) ? "attn_norm" : "ffn_norm";
  if (x == "layer_norm" && prev2 == "layer") {  // T5: layer.0 attention, then cross attention (decoder), then the MLP
    if (prev == "0") return "attn_norm";
    if (prev == "1") return decoder ? "cross_norm" : "ffn_norm";
    if (prev == "2") return "ffn_norm";
  }
  if (x == "gate") {
    return prev == "mlp" || prev == "block_sparse_moe" || prev == "moe" || prev == "feed_forward" ? "router"
                                                                                                   : std::string_view();
  }
  const auto& plain = plain_labels();
  const auto it = plain.find(x);
  return it == plain.end() ? std::string_view() : it->second;
}

// What a role is: its canonical label (if any) and how it varies it.
struct RoleClass {
  std::optional<uint64_t> expert;  // "experts.N" in the role
  std::string base;                // canonical label, "" when none
  int variant = 0;                 // 0 a weight, 1 a bias, 2 anything else of the same module
  std::string label;
};

RoleClass classify(std::string_view role, bool decoder) {
  RoleClass out;
  Parts body = split(role);
  std::string parameter;  // what follows the module: "" for a weight, " bias", or other parts
  if (body.size() > 1 && body.back() == "weight") {
    body.pop_back();
  } else if (body.size() > 1 && body.back() == "bias") {
    body.pop_back();
    parameter = " bias";
    out.variant = 1;
  } else if (body.back() == "in_proj_weight" || body.back() == "in_proj_bias") {  // torch.nn.MultiheadAttention
    parameter = body.back() == "in_proj_bias" ? " bias" : "";
    out.variant = body.back() == "in_proj_bias" ? 1 : 0;
    body.back() = "in_proj";
  }
  size_t first = 0;  // parts from here on name the module (past "experts.N")
  for (size_t i = 0; i + 1 < body.size(); ++i) {
    if (body[i] == "experts") {
      if (auto n = number_of(body[i + 1])) {
        out.expert = n;
        first = i + 2;
        break;
      }
    }
  }
  for (size_t i = body.size(); i-- > first;) {
    std::string_view label = label_at(body, i, decoder);
    if (label.empty()) continue;
    bool cross = false;
    for (size_t j = 0; j < i; ++j) cross = cross || is_cross_attention(body[j]);
    out.base = cross && (label == "q" || label == "k" || label == "v" || label == "o") ? "cross_" + std::string(label)
               : cross && label == "attn_norm"                                         ? "cross_norm"
                                                                                       : std::string(label);
    std::string extra = join(body, i + 1, body.size());  // e.g. a LoRA adapter's "lora_A"
    if (!extra.empty()) out.variant = 2;
    out.label = (out.expert ? "e" + std::to_string(*out.expert) + " " : "") + out.base +
                (extra.empty() ? "" : " " + extra) + parameter;
    return out;
  }
  out.label = role.ends_with(".weight") ? std::string(role.substr(0, role.size() - 7)) : std::string(role);
  return out;
}

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

std::string section_of(std::string_view name) {
  Parts body = split(name);
  if (body.size() > 1 && (body.back() == "weight" || body.back() == "bias")) body.pop_back();
  for (std::string_view p : body) {
    if (contains(p, "embed") || contains(p, "embd") || p == "wte" || p == "wpe") return "embedding";
  }
  if (body.size() == 1 && body[0] == "shared") return "embedding";  // T5's tied token embedding
  for (std::string_view p : body) {
    if (p == "lm_head" || p == "output" || p == "classifier" || p == "score" || p == "head" || p == "cls" ||
        p == "pooler" || p == "fc" || p == "predictions" || p == "logits") {
      return "head";
    }
  }
  const std::string_view last = body.back();
  if (contains(last, "norm") || last == "ln_f" || last == "ln_post" || last == "ln_final") return "final norm";
  return "other";
}

bool is_decoder_stack(std::string_view stack) {
  for (std::string_view p : split(stack)) {
    if (contains(p, "decoder")) return true;
  }
  return false;
}

}  // namespace

TensorPlace place_of(std::string_view name) {
  TensorPlace place;
  const Parts parts = split(name);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {  // a number that ends the name numbers no block
    if (auto n = number_of(parts[i])) {
      place.stack = join(parts, 0, i);
      place.block = n;
      place.role = join(parts, i + 1, parts.size());
      place.role_label = classify(place.role, is_decoder_stack(place.stack)).label;
      place.section = "block";
      return place;
    }
  }
  place.role = std::string(name);
  place.role_label = name.ends_with(".weight") ? std::string(name.substr(0, name.size() - 7)) : std::string(name);
  place.section = section_of(name);
  return place;
}

std::vector<StackLayout> model_layout(std::span<const TensorPlace> places) {
  struct Building {
    StackLayout layout;
    std::map<std::string, size_t, std::less<>> first_seen;  // role -> first appearance
  };
  std::vector<Building> stacks;
  std::map<std::string, size_t, std::less<>> stack_of;
  for (size_t i = 0; i < places.size(); ++i) {
    const TensorPlace& p = places[i];
    if (!p.block) continue;
    auto [it, added] = stack_of.try_emplace(p.stack, stacks.size());
    if (added) stacks.push_back({StackLayout{p.stack, {}, {}}, {}});
    Building& b = stacks[it->second];
    b.layout.block_numbers.push_back(*p.block);
    b.first_seen.try_emplace(p.role, i);
  }
  std::vector<StackLayout> out;
  out.reserve(stacks.size());
  for (Building& b : stacks) {
    auto& numbers = b.layout.block_numbers;
    std::sort(numbers.begin(), numbers.end());
    numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
    const bool decoder = is_decoder_stack(b.layout.stack);
    // (canonical?, of an expert?, expert, label rank, variant, first appearance): dense roles, then experts.
    using Key = std::tuple<int, int, uint64_t, size_t, int, size_t>;
    std::vector<std::pair<Key, std::string>> keyed;
    for (const auto& [role, seen] : b.first_seen) {
      const RoleClass c = classify(role, decoder);
      const size_t rank = static_cast<size_t>(std::find(kLabelOrder.begin(), kLabelOrder.end(), c.base) - kLabelOrder.begin());
      if (c.base.empty() || rank == kLabelOrder.size()) {
        keyed.push_back({{1, 0, 0, 0, 0, seen}, role});
      } else {
        keyed.push_back({{0, c.expert ? 1 : 0, c.expert.value_or(0), rank, c.variant, seen}, role});
      }
    }
    std::sort(keyed.begin(), keyed.end());
    for (auto& [key, role] : keyed) b.layout.roles.push_back(std::move(role));
    out.push_back(std::move(b.layout));
  }
  return out;
}

}  // namespace tensormorph::engine
