// The role of a parallel layer's parameter comes from its module name, as Megatron names its layers
// in both its legacy models (query_key_value, dense_h_to_4h, ...) and Megatron-core (linear_qkv,
// linear_fc1, ...). A joined tensor is blocks: each rank's part (or each block of a part that is
// itself gathered) moved to where it lies in the whole.
#include "formats/megatron/tensor_parallel.h"

#include <fnmatch.h>

#include <algorithm>
#include <array>

#include "core/printable.h"

namespace tensormorph::megatron {
namespace {

using pytorch::PickleKind;
using pytorch::PickleValue;

/// How a parallel layer's parameter is split across tensor-parallel ranks.
enum class Role {
  kColumn,      ///< output features split: dim 0 (weights and biases)
  kGatedColumn, ///< a SwiGLU input projection: each rank holds its rows of the gate, then of the up half
  kRow,         ///< input features split: dim 1 (weights)
  kReplicated,  ///< every rank holds the whole tensor (norms, row-parallel biases, position embeddings)
  kUnknown,     ///< not inferable from the name
};

std::vector<std::string_view> components(std::string_view name) {
  std::vector<std::string_view> parts;
  for (size_t begin = 0;;) {
    const size_t dot = name.find('.', begin);
    parts.push_back(name.substr(begin, dot == std::string_view::npos ? std::string_view::npos : dot - begin));
    if (dot == std::string_view::npos) return parts;
    begin = dot + 1;
  }
}

Role role_of(std::string_view name, bool swiglu) {
  const auto parts = components(name);
  const std::string_view leaf = parts.back();
  const std::string_view module = parts.size() >= 2 ? parts[parts.size() - 2] : std::string_view();
  const std::string_view parent = parts.size() >= 3 ? parts[parts.size() - 3] : std::string_view();
  if (leaf.find("norm") != std::string_view::npos || module.find("norm") != std::string_view::npos) return Role::kReplicated;
  const bool weight_or_bias = leaf == "weight" || leaf == "bias";
  static constexpr std::array<std::string_view, 7> kColumn = {"query_key_value", "linear_qkv", "dense_h_to_4h", "linear_fc1",
                                                               "word_embeddings", "output_layer", "lm_head"};
  if (weight_or_bias && std::find(kColumn.begin(), kColumn.end(), module) != kColumn.end()) {
    return swiglu && (module == "dense_h_to_4h" || module == "linear_fc1") ? Role::kGatedColumn : Role::kColumn;
  }
  const bool row_parallel = module == "linear_proj" || module == "dense_4h_to_h" || module == "linear_fc2" ||
                            (module == "dense" && (parent == "self_attention" || parent == "attention"));
  if (row_parallel && leaf == "weight") return Role::kRow;
  if (row_parallel && leaf == "bias") return Role::kReplicated;
  if (module == "position_embeddings" && leaf == "weight") return Role::kReplicated;
  return Role::kUnknown;
}

bool all_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// `part`'s blocks (the part itself when stored whole) cut to its rows [row_begin, row_end) and
/// moved so that the part's row `row_begin`, column 0 lands at `origin` in the whole tensor.
void place_part(const TensorInfo& part, const std::vector<uint64_t>& origin, uint64_t row_begin, uint64_t row_end,
                std::vector<TensorChunk>* out) {
  std::vector<TensorChunk> blocks = part.chunks;
  if (blocks.empty()) {
    TensorChunk whole;
    whole.start.assign(part.shape.size(), 0);
    whole.sizes = part.shape;
    whole.file = part.file;
    whole.offset = part.offset;
    whole.nbytes = part.nbytes;
    whole.strides = part.strides;
    blocks.push_back(std::move(whole));
  }
  const uint64_t element_bytes = dtype_info(part.dtype).block_bytes;
  for (TensorChunk& block : blocks) {
    const uint64_t first = std::max(block.start[0], row_begin), last = std::min(block.start[0] + block.sizes[0], row_end);
    if (first >= last) continue;
    uint64_t row_elements = 1;
    for (size_t d = 1; d < block.sizes.size(); ++d) row_elements *= block.sizes[d];
    const uint64_t row_stride = block.strides.empty() ? row_elements : static_cast<uint64_t>(block.strides[0]);
    const uint64_t skip = (first - block.start[0]) * row_stride * element_bytes;
    block.offset += skip;
    // A contiguous block's span is exact; a strided one's is what is left of its span.
    block.nbytes = block.strides.empty() ? (last - first) * row_elements * element_bytes : block.nbytes - std::min(skip, block.nbytes);
    block.sizes[0] = last - first;
    block.start[0] = first - row_begin;
    for (size_t d = 0; d < block.start.size(); ++d) block.start[d] += origin[d];
    out->push_back(std::move(block));
  }
}

}  // namespace

TrainingArgs training_args(const pytorch::PickleTree& tree) {
  TrainingArgs args;
  const PickleValue* root = tree.root();
  if (root == nullptr || root->kind != PickleKind::kDict) return args;
  const PickleValue* namespace_object = root->get("args");
  const PickleValue* fields = namespace_object != nullptr ? namespace_object->state : nullptr;
  if (fields == nullptr || fields->kind != PickleKind::kDict) return args;
  if (const PickleValue* v = fields->get("swiglu"); v != nullptr && v->kind == PickleKind::kBool) args.swiglu = v->boolean;
  const auto integer = [&](const char* key, std::optional<int64_t>& field) {
    if (const PickleValue* v = fields->get(key); v != nullptr && v->kind == PickleKind::kInt) field = v->integer;
  };
  integer("tensor_model_parallel_size", args.tensor_parallel_size);
  integer("pipeline_model_parallel_size", args.pipeline_parallel_size);
  integer("virtual_pipeline_model_parallel_size", args.virtual_pipeline_size);
  return args;
}

Result<TensorParallelJoin> TensorParallelJoin::make(std::span<const std::string> rules, bool swiglu) {
  std::vector<Rule> parsed;
  for (const std::string& text : rules) {
    const size_t eq = text.rfind('=');
    Rule rule;
    rule.text = text;
    rule.glob = eq == std::string::npos ? "" : text.substr(0, eq);
    const std::string how = eq == std::string::npos ? "" : text.substr(eq + 1);
    if (how == "replicated") {
      rule.kind = JoinKind::kReplicated;
    } else if (how == "gated") {
      rule.gated = true;
    } else if (all_digits(how) && how.size() <= 2) {
      rule.dim = std::stoul(how);
    } else {
      rule.glob.clear();
    }
    if (rule.glob.empty()) {
      return Status::InvalidArgument("tensor-parallel rule " + quoted_name(text, 80) +
                                     ": expected GLOB=DIM (a dimension number), GLOB=gated or GLOB=replicated");
    }
    parsed.push_back(std::move(rule));
  }
  return TensorParallelJoin(std::move(parsed), swiglu);
}

Result<JoinResult> TensorParallelJoin::join(const std::string& global, std::string_view layer_name, std::span<const TensorInfo* const> parts) {
  const TensorInfo& first = *parts[0];
  const size_t n = parts.size();
  const bool alike = std::all_of(parts.begin(), parts.end(), [&](const TensorInfo* p) {
    return p != nullptr && p->dtype == first.dtype && p->shape == first.shape;
  });
  Role role = role_of(layer_name, swiglu_);
  size_t dim = role == Role::kRow ? 1 : 0;
  const auto rule = std::find_if(rules_.begin(), rules_.end(), [&](const Rule& r) { return fnmatch(r.glob.c_str(), global.c_str(), 0) == 0; });
  if (rule != rules_.end()) {
    role = rule->kind == JoinKind::kReplicated ? Role::kReplicated : rule->gated ? Role::kGatedColumn : Role::kColumn;
    dim = rule->dim;
    ++rule->matched;
    if (role != Role::kReplicated && dim >= first.shape.size()) {
      return Status::InvalidArgument("tensor-parallel rule " + quoted_name(rule->text, 80) + ": tensor " + quoted_name(global) + " has " +
                                     std::to_string(first.shape.size()) + " dimension" + (first.shape.size() == 1 ? "" : "s") +
                                     ", so it cannot be joined along dim " + std::to_string(dim));
    }
  }
  const bool splittable = role != Role::kReplicated && role != Role::kUnknown;
  JoinResult result;
  if (!alike || role == Role::kUnknown || (splittable && (first.shape.size() <= dim || dtype_info(first.dtype).block_elems != 1)) ||
      (role == Role::kGatedColumn && first.shape[0] % 2 != 0)) {
    return result;
  }
  if (role == Role::kReplicated) {
    result.kind = JoinKind::kReplicated;
    result.tensor = first;
    result.tensor.name = global;
    return result;
  }
  TensorInfo& whole = result.tensor;
  whole.name = global;
  whole.dtype = first.dtype;
  whole.shape = first.shape;
  whole.shape[dim] *= n;
  TM_ASSIGN_OR_RETURN(whole.nbytes, dtype_storage_bytes(whole.dtype, whole.elements()));
  const uint64_t rows = first.shape[0];
  for (size_t r = 0; r < n; ++r) {
    std::vector<uint64_t> origin(whole.shape.size(), 0);
    if (role == Role::kGatedColumn) {
      // Rank r holds [gate rows r*h .. (r+1)*h; up rows r*h .. (r+1)*h] of [gate; up].
      const uint64_t half = rows / 2;
      origin[0] = r * half;
      place_part(*parts[r], origin, 0, half, &whole.chunks);
      origin[0] = n * half + r * half;
      place_part(*parts[r], origin, half, rows, &whole.chunks);
    } else {
      origin[dim] = r * first.shape[dim];
      place_part(*parts[r], origin, 0, rows, &whole.chunks);
    }
  }
  if (whole.chunks.empty()) {  // no elements: nothing to gather
    whole.file = first.file;
    whole.offset = first.offset;
  } else {
    whole.file = whole.chunks[0].file;
    whole.offset = whole.chunks[0].offset;
  }
  result.kind = JoinKind::kJoined;
  return result;
}

std::string names_text(const std::vector<std::string>& names) {
  std::string list;
  for (size_t i = 0; i < std::min<size_t>(names.size(), 5); ++i) list += (i ? ", " : "") + quoted_name(names[i]);
  if (names.size() > 5) list += " and " + std::to_string(names.size() - 5) + " more";
  return list;
}

uint64_t TensorParallelJoin::decided_by_rules() const {
  uint64_t total = 0;
  for (const Rule& rule : rules_) total += rule.matched;
  return total;
}

std::vector<std::string> TensorParallelJoin::unmatched_rule_notes() const {
  std::vector<std::string> notes;
  for (const Rule& rule : rules_) {
    if (rule.matched == 0) notes.push_back("tensor-parallel rule " + quoted_name(rule.text, 80) + " matched no model tensor");
  }
  return notes;
}

}  // namespace tensormorph::megatron
