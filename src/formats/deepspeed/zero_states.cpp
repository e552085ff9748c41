// Reading the values DeepSpeed pickles beside the tensors: torch.Size shapes, per-group dicts, the
// stage and partition count. Every error names the archive, the value and its pickle byte offset.
#include "formats/deepspeed/zero_states.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "core/printable.h"
#include "formats/pytorch/pytorch.h"

namespace tensormorph::deepspeed {
namespace {

namespace fs = std::filesystem;
using pytorch::PickleKind;
using pytorch::PickleValue;

/// Shapes beyond this many elements are not a parameter's (and their products could overflow).
constexpr uint64_t kMaxElements = uint64_t{1} << 50;

Status value_error(const fs::path& path, const PickleValue* at, const std::string& what) {
  return Status::FormatError(path.string() + ": " + what + (at != nullptr ? " (pickle byte " + std::to_string(at->offset) + ")" : ""));
}

bool is_sequence(const PickleValue* v) { return v != nullptr && (v->kind == PickleKind::kList || v->kind == PickleKind::kTuple); }

/// A torch.Size (pickled as torch.Size((d0, d1, ...))) or a plain tuple or list of sizes.
std::optional<std::vector<uint64_t>> shape_of(const PickleValue* v) {
  if (v != nullptr && v->kind == PickleKind::kObject) {
    const PickleValue* callable = v->callable_global();
    if (callable == nullptr || !callable->is_global("torch.Size") || !is_sequence(v->args) || v->args->items.size() != 1) {
      return std::nullopt;
    }
    v = v->args->items[0];
  }
  if (!is_sequence(v)) return std::nullopt;
  std::vector<uint64_t> shape;
  uint64_t elements = 1;
  for (const PickleValue* d : v->items) {
    if (d->kind != PickleKind::kInt || d->integer < 0) return std::nullopt;
    shape.push_back(static_cast<uint64_t>(d->integer));
    if (__builtin_mul_overflow(elements, shape.back(), &elements) || elements > kMaxElements) return std::nullopt;
  }
  return shape;
}

uint64_t product(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // bounded by shape_of
  return n;
}

Result<const PickleValue*> root_dict(const fs::path& path, const pytorch::PickleTree& tree) {
  const PickleValue* root = tree.root();
  if (root == nullptr || root->kind != PickleKind::kDict) {
    return value_error(path, root, "holds a " + std::string(root ? pickle_kind_name(root->kind) : "nothing") + ", not a dict of states");
  }
  return root;
}

/// Appends the entries of `dict` (name -> torch.Size), which `what` names in errors ("param_shapes
/// group 0"), to `out`.
Status read_shapes(const fs::path& path, const PickleValue& dict, const std::string& what, std::vector<ParamShape>& out) {
  for (const auto& [key, value] : dict.entries) {
    if (key->kind != PickleKind::kString) return value_error(path, key, what + " has a key that is not a name");
    const auto shape = shape_of(value);
    if (!shape) return value_error(path, value, what + ", parameter " + quoted_name(key->text) + ": not a torch.Size of at most 2^50 elements");
    out.push_back({key->text, *shape, product(*shape)});
  }
  return Status::Ok();
}

}  // namespace

std::string mp_rank_name(uint32_t mp) {
  char name[32];
  std::snprintf(name, sizeof name, "mp_rank_%02u", mp);
  return name;
}

std::string model_states_name(uint32_t mp, bool zero3, uint64_t dp) {
  return (zero3 ? "zero_pp_rank_" + std::to_string(dp) + "_" : std::string()) + mp_rank_name(mp) + "_model_states.pt";
}

std::string optim_states_name(uint64_t dp, uint32_t mp, bool bf16) {
  return (bf16 ? std::string(kBf16Prefix) : std::string()) + "zero_pp_rank_" + std::to_string(dp) + "_" + mp_rank_name(mp) + "_optim_states.pt";
}

Result<ModelStates> read_model_states(const fs::path& path) {
  TM_ASSIGN_OR_RETURN(const pytorch::PickleTree tree, pytorch::read_archive_pickle(path));
  TM_ASSIGN_OR_RETURN(const PickleValue* root, root_dict(path, tree));
  ModelStates states;
  const PickleValue* groups = root->get("param_shapes");
  if (groups == nullptr) {
    return Status::Unsupported(path.string() + ": no param_shapes, so the flat partitions cannot be cut into parameters");
  }
  if (!is_sequence(groups)) return value_error(path, groups, "param_shapes is a " + std::string(pickle_kind_name(groups->kind)) + ", not a list of groups");
  for (size_t g = 0; g < groups->items.size(); ++g) {
    const PickleValue* group = groups->items[g];
    if (group->kind != PickleKind::kDict) {
      return value_error(path, group, "param_shapes group " + std::to_string(g) + " is a " + std::string(pickle_kind_name(group->kind)) +
                                          ", not a dict of name -> torch.Size");
    }
    TM_RETURN_IF_ERROR(read_shapes(path, *group, "param_shapes group " + std::to_string(g), states.groups.emplace_back()));
  }
  if (const PickleValue* frozen = root->get("frozen_param_shapes"); frozen != nullptr && frozen->kind == PickleKind::kDict) {
    TM_RETURN_IF_ERROR(read_shapes(path, *frozen, "frozen_param_shapes", states.frozen));
  }
  if (const PickleValue* shared = root->get("shared_params"); shared != nullptr && shared->kind == PickleKind::kDict) {
    for (const auto& [alias, source] : shared->entries) {
      if (alias->kind == PickleKind::kString && source->kind == PickleKind::kString) states.shared.emplace_back(alias->text, source->text);
    }
  }
  if (const PickleValue* version = root->get("ds_version"); version != nullptr && version->kind == PickleKind::kString) {
    states.ds_version = printable(version->text, 40);
  }
  if (const PickleValue* mp = root->get("mp_world_size"); mp != nullptr && mp->kind == PickleKind::kInt) states.mp_world_size = mp->integer;
  states.args = megatron::training_args(tree);
  return states;
}

Result<RankStates> read_rank_states(const fs::path& path, uint32_t file_index) {
  TM_ASSIGN_OR_RETURN(const pytorch::PickleTree tree, pytorch::read_archive_pickle(path));
  TM_ASSIGN_OR_RETURN(const PickleValue* root, root_dict(path, tree));
  const PickleValue* optimizer = root->get("optimizer_state_dict");
  if (optimizer == nullptr || optimizer->kind != PickleKind::kDict) {
    return value_error(path, optimizer, "no optimizer_state_dict dict: not a ZeRO optimizer-states archive");
  }
  RankStates rank;
  const PickleValue* stage = optimizer->get("zero_stage");
  if (stage == nullptr || stage->kind != PickleKind::kInt) return value_error(path, stage, "optimizer_state_dict has no integer zero_stage");
  if (stage->integer < 1 || stage->integer > 3) {
    return value_error(path, stage, "zero_stage is " + std::to_string(stage->integer) + "; expected 1, 2 or 3");
  }
  rank.zero_stage = stage->integer;
  // A list under ZeRO-1/2 when expert groups partition over fewer ranks: the largest is the world.
  const PickleValue* count = optimizer->get("partition_count");
  if (count != nullptr && count->kind == PickleKind::kInt) {
    rank.partition_count = count->integer;
  } else if (is_sequence(count)) {
    for (const PickleValue* c : count->items) {
      if (c->kind != PickleKind::kInt) return value_error(path, c, "partition_count holds a " + std::string(pickle_kind_name(c->kind)));
      rank.partition_count = std::max(rank.partition_count, c->integer);
    }
  } else {
    return value_error(path, count, "optimizer_state_dict has no partition_count (an integer or a list of integers)");
  }
  if (rank.partition_count < 1 || rank.partition_count > 1'000'000) {
    return value_error(path, count, "partition_count is " + std::to_string(rank.partition_count) + "; expected a data-parallel world size");
  }
  const std::string key = rank.zero_stage <= 2 ? "single_partition_of_fp32_groups" : "fp32_flat_groups";
  const PickleValue* groups = optimizer->get(key);
  if (!is_sequence(groups)) {
    return value_error(path, groups, "optimizer_state_dict has no " + key + " list, which zero_stage " + std::to_string(rank.zero_stage) + " keeps");
  }
  TM_ASSIGN_OR_RETURN(auto archive, pytorch::open_file(path));
  const uint64_t file_bytes = archive->files()[0].size;
  for (size_t g = 0; g < groups->items.size(); ++g) {
    const std::string name = "optimizer_state_dict." + key + "." + std::to_string(g);
    const TensorInfo* flat = archive->find(name);
    const std::string where = path.string() + ": " + key + " group " + std::to_string(g);
    if (flat == nullptr) return value_error(path, groups->items[g], key + " group " + std::to_string(g) + " is not a tensor");
    if (flat->dtype != DType::kF32) {
      return Status::FormatError(where + " is " + std::string(dtype_name(flat->dtype)) + "; expected the fp32 master partition");
    }
    if (flat->shape.size() != 1) {
      return Status::FormatError(where + " has shape " + flat->shape_string() + "; expected a 1-D flat partition");
    }
    if (!flat->contiguous()) return Status::FormatError(where + " is a strided view; expected a contiguous flat partition");
    uint64_t end = 0;
    if (flat->nbytes < flat->elements() * 4 || __builtin_add_overflow(flat->offset, flat->elements() * 4, &end) || end > file_bytes) {
      return Status::FormatError(where + ": " + std::to_string(flat->elements()) + " elements at byte " + std::to_string(flat->offset) +
                                 " do not fit its storage or the file (" + std::to_string(file_bytes) + " bytes)");
    }
    TensorInfo located = *flat;
    located.file = file_index;
    rank.groups.push_back(std::move(located));
  }
  return rank;
}

}  // namespace tensormorph::deepspeed
