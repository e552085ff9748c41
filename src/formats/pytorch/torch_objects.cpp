#include "formats/pytorch/torch_objects.h"

#include <array>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/printable.h"

namespace tensormorph::pytorch {
namespace {

constexpr size_t kMaxListedGlobals = 32;
constexpr size_t kExampleIgnored = 3;
constexpr size_t kMaxNotes = 64;
const std::string kRootTensorName = "tensor";

struct NamedDType {
  std::string_view name;
  DType dtype;
};

// torch.<X>Storage classes (legacy typed storages, as torch.save still writes them).
constexpr std::array<NamedDType, 17> kStorageTypes{{
    {"torch.FloatStorage", DType::kF32},        {"torch.HalfStorage", DType::kF16},
    {"torch.BFloat16Storage", DType::kBF16},    {"torch.DoubleStorage", DType::kF64},
    {"torch.LongStorage", DType::kI64},         {"torch.IntStorage", DType::kI32},
    {"torch.ShortStorage", DType::kI16},        {"torch.CharStorage", DType::kI8},
    {"torch.ByteStorage", DType::kU8},          {"torch.BoolStorage", DType::kBool},
    {"torch.ComplexFloatStorage", DType::kC64}, {"torch.Float8_e4m3fnStorage", DType::kF8E4M3},
    {"torch.Float8_e5m2Storage", DType::kF8E5M2}, {"torch.UInt16Storage", DType::kU16},
    {"torch.UInt32Storage", DType::kU32},       {"torch.UInt64Storage", DType::kU64},
    {"torch.UntypedStorage", DType::kU8},
}};

// torch.<dtype> globals, which stand in for the storage class in some writers.
constexpr std::array<NamedDType, 26> kDTypeGlobals{{
    {"torch.float32", DType::kF32},  {"torch.float", DType::kF32},       {"torch.float16", DType::kF16},
    {"torch.half", DType::kF16},     {"torch.bfloat16", DType::kBF16},   {"torch.float64", DType::kF64},
    {"torch.double", DType::kF64},   {"torch.int64", DType::kI64},       {"torch.long", DType::kI64},
    {"torch.int32", DType::kI32},    {"torch.int", DType::kI32},         {"torch.int16", DType::kI16},
    {"torch.short", DType::kI16},    {"torch.int8", DType::kI8},         {"torch.uint8", DType::kU8},
    {"torch.bool", DType::kBool},    {"torch.complex64", DType::kC64},   {"torch.cfloat", DType::kC64},
    {"torch.float8_e4m3fn", DType::kF8E4M3}, {"torch.float8_e5m2", DType::kF8E5M2},
    {"torch.uint16", DType::kU16},   {"torch.uint32", DType::kU32},      {"torch.uint64", DType::kU64},
    {"torch.float8_e8m0fnu", DType::kF8E8M0}, {"torch.float4_e2m1fn_x2", DType::kU8},
    {"torch.bits8", DType::kU8},
}};

template <size_t N>
std::optional<DType> lookup(const std::array<NamedDType, N>& table, std::string_view name) {
  for (const NamedDType& entry : table) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

// Callables the machine or this interpreter understands; any other called global is reported.
bool is_understood_callable(std::string_view name) {
  static const std::unordered_set<std::string_view> kUnderstood = {
      "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor", "torch._utils._rebuild_parameter",
      "torch._utils._rebuild_parameter_with_state", "torch._tensor._rebuild_from_type_v2",
      "torch._tensor._rebuild_from_type", "collections.OrderedDict", "builtins.dict", "builtins.set",
      "builtins.frozenset", "builtins.list", "builtins.tuple", "torch.Size", "_codecs.encode",
      "builtins.bytearray", "builtins.bytes", "copyreg._reconstructor", "torch._utils._rebuild_wrapper_subclass",
      "torch.distributed._shard.sharded_tensor.shard.Shard", "torch.distributed._shard.metadata.ShardMetadata",
      "torch.distributed._shard.sharded_tensor.metadata.ShardedTensorMetadata"};
  return kUnderstood.contains(name);
}

std::string join_name(const std::string& prefix, std::string_view part) {
  return prefix.empty() ? std::string(part) : prefix + "." + std::string(part);
}

// A dict key as a name component; nullopt for keys that do not name anything (tuples, objects).
std::optional<std::string> key_text(const PickleValue& key) {
  switch (key.kind) {
    case PickleKind::kString:
    case PickleKind::kBytes: return key.text;
    case PickleKind::kInt: return std::to_string(key.integer);
    case PickleKind::kBool: return key.boolean ? "True" : "False";
    case PickleKind::kNone: return "None";
    default: return std::nullopt;
  }
}

// A tensor view resolved to bytes in the archive.
struct TensorView {
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;
  std::vector<int64_t> strides;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
};

// A storage entry located in the archive.
struct StorageEntry {
  uint64_t data_offset = 0;
  uint64_t size = 0;
};

// Outcome of looking at a value as a possible tensor.
struct Interpretation {
  enum class Kind { kNotTensor, kTensor, kUnsupported } kind = Kind::kNotTensor;
  TensorView view;
  std::string reason;  // kUnsupported: why it was skipped
};

class TensorCollector {
 public:
  TensorCollector(const ZipArchive& zip, std::string_view prefix, std::string_view pickle_name,
                  const CollectLimits& limits)
      : zip_(zip), prefix_(prefix), pickle_name_(pickle_name), limits_(limits) {}

  Result<TorchTensors> run(const PickleTree& tree) {
    TM_RETURN_IF_ERROR(walk(tree.root(), "", 0));
    TorchTensors out;
    out.tensors = std::move(tensors_);
    out.notes = std::move(notes_);
    out.sharded = std::move(sharded_);
    if (dropped_notes_ > 0) out.notes.push_back(std::to_string(dropped_notes_) + " more notes not shown");
    size_t listed = 0;
    size_t unlisted = 0;
    for (const std::string& global : tree.called_globals()) {
      if (is_understood_callable(global)) continue;
      if (listed++ < kMaxListedGlobals) {
        out.notes.push_back("recorded, not imported: " + global);
      } else {
        ++unlisted;
      }
    }
    if (unlisted > 0) out.notes.push_back("recorded, not imported: " + std::to_string(unlisted) + " more globals");
    if (ignored_count_ > 0) {
      std::string note = "ignored " + std::to_string(ignored_count_) + " non-tensor value" +
                         (ignored_count_ == 1 ? "" : "s") + " (e.g. ";
      for (size_t i = 0; i < ignored_examples_.size(); ++i) note += (i ? ", " : "") + quoted_name(ignored_examples_[i]);
      out.notes.push_back(note + ")");
    }
    return out;
  }

 private:
  Status tensor_error(const std::string& name, const PickleValue& at, std::string_view message) const {
    return Status::FormatError(zip_.path().string() + ": tensor " + quoted_name(name) + ": " + std::string(message) + " (" +
                               pickle_name_ + " byte " + std::to_string(at.offset) + ")");
  }
  Status tensor_unsupported(const std::string& name, const PickleValue& at, std::string_view message) const {
    return Status::Unsupported(zip_.path().string() + ": tensor " + quoted_name(name) + ": " + std::string(message) + " (" +
                               pickle_name_ + " byte " + std::to_string(at.offset) + ")");
  }

  Status walk(const PickleValue* value, const std::string& name, int depth) {
    if (++visits_ > limits_.max_visits) {
      return Status::ResourceExhausted(zip_.path().string() + ": " + pickle_name_ + ": object graph has more than " +
                                       std::to_string(limits_.max_visits) + " paths; refusing to name them all");
    }
    if (depth > limits_.max_depth) {
      return Status::FormatError(zip_.path().string() + ": " + pickle_name_ + " byte " + std::to_string(value->offset) +
                                 ": values nest deeper than " + std::to_string(limits_.max_depth) + " levels at " +
                                 quoted_name(name));
    }
    // A tensor saved on its own (torch.save(t)) has no path; call it "tensor".
    const std::string& display = name.empty() ? kRootTensorName : name;
    if (is_sharded_tensor(*value)) return add_sharded_tensor(*value, display, depth);
    TM_ASSIGN_OR_RETURN(Interpretation tensor, interpret(value, display, depth));
    if (tensor.kind == Interpretation::Kind::kTensor) return add_tensor(display, tensor.view);
    if (tensor.kind == Interpretation::Kind::kUnsupported) {
      note("skipped tensor " + quoted_name(display) + ": " + tensor.reason);
      return Status::Ok();
    }
    // A shared subtree already known to hold no tensors need not be walked again: this keeps
    // DAGs of plain data linear. Only subtrees walked without cutting a cycle qualify.
    if (tensor_free_.contains(value)) return Status::Ok();
    if (!on_path_.insert(value).second) {  // a cycle: already being walked
      ++cycle_cuts_;
      return Status::Ok();
    }
    const size_t tensors_before = tensors_.size();
    const uint64_t cuts_before = cycle_cuts_;
    Status status = walk_children(*value, name, depth);
    on_path_.erase(value);
    if (status.ok() && tensors_.size() == tensors_before && cycle_cuts_ == cuts_before) tensor_free_.insert(value);
    return status;
  }

  Status walk_children(const PickleValue& value, const std::string& name, int depth) {
    switch (value.kind) {
      case PickleKind::kDict: return walk_entries(value, name, depth);
      case PickleKind::kList:
      case PickleKind::kTuple: return walk_items(value, name, depth);
      case PickleKind::kObject: return walk_object(value, name, depth);
      default: ignore(name); return Status::Ok();
    }
  }

  Status walk_entries(const PickleValue& dict, const std::string& name, int depth) {
    for (const auto& [key, child] : dict.entries) {
      std::optional<std::string> part = key_text(*key);
      if (!part) {
        ignore(join_name(name, "<" + std::string(pickle_kind_name(key->kind)) + " key>"));
        continue;
      }
      TM_RETURN_IF_ERROR(walk(child, join_name(name, *part), depth + 1));
    }
    return Status::Ok();
  }

  Status walk_items(const PickleValue& sequence, const std::string& name, int depth) {
    for (size_t i = 0; i < sequence.items.size(); ++i) {
      TM_RETURN_IF_ERROR(walk(sequence.items[i], join_name(name, std::to_string(i)), depth + 1));
    }
    return Status::Ok();
  }

  // An instance's attributes: the BUILD state dict, or the dict half of a (dict, slots) pair.
  static std::vector<const PickleValue*> attribute_dicts(const PickleValue& object) {
    std::vector<const PickleValue*> dicts;
    const PickleValue* state = object.state;
    if (state == nullptr) return dicts;
    if (state->kind == PickleKind::kDict) {
      dicts.push_back(state);
    } else if (state->kind == PickleKind::kTuple && state->items.size() == 2) {
      for (const PickleValue* part : state->items) {
        if (part->kind == PickleKind::kDict) dicts.push_back(part);
      }
    }
    return dicts;
  }

  // nn.Module instances are named like state_dict(): parameters, buffers and submodules without
  // the "_parameters." component; other objects by attribute name.
  Status walk_object(const PickleValue& object, const std::string& name, int depth) {
    const std::vector<const PickleValue*> dicts = attribute_dicts(object);
    bool is_module = false;
    for (const PickleValue* attributes : dicts) {
      is_module = is_module || attributes->get("_parameters") || attributes->get("_modules");
    }
    for (const PickleValue* attributes : dicts) {
      if (!is_module) {
        TM_RETURN_IF_ERROR(walk_entries(*attributes, name, depth));
        continue;
      }
      for (std::string_view member : {"_parameters", "_buffers", "_modules"}) {
        const PickleValue* members = attributes->get(member);
        if (members == nullptr) continue;
        if (members->kind != PickleKind::kDict) {
          TM_RETURN_IF_ERROR(walk(members, join_name(name, member), depth + 1));
          continue;
        }
        if (!on_path_.insert(members).second) continue;
        Status status = walk_entries(*members, name, depth + 1);
        on_path_.erase(members);
        TM_RETURN_IF_ERROR(status);
      }
      // Public attributes may hold tensors too; private bookkeeping (_forward_hooks, ...) is skipped.
      for (const auto& [key, child] : attributes->entries) {
        if (key->kind != PickleKind::kString || key->text.empty() || key->text.front() == '_') continue;
        TM_RETURN_IF_ERROR(walk(child, join_name(name, key->text), depth + 1));
      }
    }
    TM_RETURN_IF_ERROR(walk_entries(object, name, depth));
    TM_RETURN_IF_ERROR(walk_items(object, name, depth));
    // An object built only from its arguments (e.g. a namedtuple) keeps its contents there.
    if (dicts.empty() && object.entries.empty() && object.items.empty() && object.args != nullptr &&
        (object.args->kind == PickleKind::kTuple || object.args->kind == PickleKind::kList) &&
        !(object.state && object.state->kind != PickleKind::kNone)) {
      return walk_items(*object.args, name, depth);
    }
    if (dicts.empty() && object.state && object.state->kind != PickleKind::kNone) {
      return walk(object.state, name, depth + 1);
    }
    return Status::Ok();
  }

  void note(std::string text) {
    if (notes_.size() < kMaxNotes) {
      notes_.push_back(std::move(text));
    } else {
      ++dropped_notes_;
    }
  }

  void ignore(const std::string& name) {
    ++ignored_count_;
    if (ignored_examples_.size() < kExampleIgnored) ignored_examples_.push_back(name.empty() ? "<root>" : name);
  }

  Status add_tensor(const std::string& name, const TensorView& view) {
    if (tensors_.size() >= limits_.max_tensors) {
      return Status::ResourceExhausted(zip_.path().string() + ": " + pickle_name_ + ": more than " +
                                       std::to_string(limits_.max_tensors) + " tensors (at " + quoted_name(name) + ")");
    }
    std::string unique = name;
    for (int suffix = 2; !names_.insert(unique).second; ++suffix) unique = name + "#" + std::to_string(suffix);
    if (unique != name) note("two values are named " + quoted_name(name) + "; the later one is listed as " + quoted_name(unique));
    TensorInfo info;
    info.name = std::move(unique);
    info.dtype = view.dtype;
    info.shape = view.shape;
    info.strides = view.strides;
    info.file = 0;
    info.offset = view.offset;
    info.nbytes = view.nbytes;
    tensors_.push_back(std::move(info));
    return Status::Ok();
  }

  Result<Interpretation> interpret(const PickleValue* value, const std::string& name, int depth) {
    const PickleValue* callable = value->callable_global();
    if (callable == nullptr) return Interpretation{};
    if (auto it = cache_.find(value); it != cache_.end()) return it->second;
    TM_ASSIGN_OR_RETURN(Interpretation result, interpret_call(callable->text, value->args, *value, name, depth));
    cache_.emplace(value, result);
    return result;
  }

  Result<Interpretation> interpret_call(const std::string& function, const PickleValue* args, const PickleValue& at,
                                        const std::string& name, int depth) {
    if (depth > limits_.max_depth) return tensor_error(name, at, "tensor rebuild calls nest too deeply");
    const bool is_rebuild = function == "torch._utils._rebuild_tensor_v2" || function == "torch._utils._rebuild_tensor";
    const bool is_parameter = function == "torch._utils._rebuild_parameter" ||
                              function == "torch._utils._rebuild_parameter_with_state";
    const bool is_from_type = function == "torch._tensor._rebuild_from_type_v2" ||
                              function == "torch._tensor._rebuild_from_type";
    const bool is_torch_rebuild = function.starts_with("torch._utils._rebuild_") ||
                                  function.starts_with("torch._tensor._rebuild_");
    if (!is_torch_rebuild) return Interpretation{};
    if (!is_rebuild && !is_parameter && !is_from_type) {
      Interpretation skipped;
      skipped.kind = Interpretation::Kind::kUnsupported;
      skipped.reason = function + " is not supported (pickle byte " + std::to_string(at.offset) + ")";
      return skipped;
    }
    if (args == nullptr || args->kind != PickleKind::kTuple) {
      return tensor_error(name, at, function + " is not called with an argument tuple");
    }
    const std::vector<PickleValue*>& a = args->items;
    if (is_rebuild) {
      Interpretation tensor;
      tensor.kind = Interpretation::Kind::kTensor;
      TM_ASSIGN_OR_RETURN(tensor.view, rebuild_view(a, at, name, function));
      return tensor;
    }
    if (is_parameter) {
      if (a.empty()) return tensor_error(name, at, function + " has no data argument");
      TM_ASSIGN_OR_RETURN(Interpretation inner, interpret(a[0], name, depth + 1));
      if (inner.kind == Interpretation::Kind::kNotTensor) {
        return tensor_error(name, at, function + " wraps a " + std::string(pickle_kind_name(a[0]->kind)) +
                                          ", not a tensor");
      }
      return inner;
    }
    // _rebuild_from_type_v2(func, new_type, args, state): a tensor subclass around func(*args).
    if (a.size() < 3 || a[0]->kind != PickleKind::kGlobal) {
      return tensor_error(name, at, function + " needs (function, type, args, ...) arguments");
    }
    TM_ASSIGN_OR_RETURN(Interpretation inner, interpret_call(a[0]->text, a[2], at, name, depth + 1));
    if (inner.kind == Interpretation::Kind::kNotTensor) {
      return tensor_error(name, at, function + " rebuilds with " + a[0]->text + ", which is not a tensor rebuild function");
    }
    return inner;
  }

  // _rebuild_from_type_v2(_rebuild_wrapper_subclass, ShardedTensor, (cls, dtype, size, ...),
  // (local_shards, ShardedTensorMetadata, ...)): how torch.save writes a ShardedTensor.
  static bool is_sharded_tensor(const PickleValue& value) {
    const PickleValue* callable = value.callable_global();
    if (callable == nullptr || !callable->is_global("torch._tensor._rebuild_from_type_v2")) return false;
    const PickleValue* args = value.args;
    return args != nullptr && args->kind == PickleKind::kTuple && args->items.size() >= 2 &&
           args->items[1]->is_global("torch.distributed._shard.sharded_tensor.api.ShardedTensor");
  }

  // The named attribute of an object pickled with a __dict__ or (None, slots) state; null if absent.
  static const PickleValue* attribute(const PickleValue& object, std::string_view key) {
    for (const PickleValue* attributes : attribute_dicts(object)) {
      if (const PickleValue* found = attributes->get(std::string(key))) return found;
    }
    return nullptr;
  }

  // Its local shards become tensors named by the part they hold ("w[2:4, 0:3]"), or by the
  // tensor's name when one shard holds all of it.
  Status add_sharded_tensor(const PickleValue& value, const std::string& name, int depth) {
    const std::vector<PickleValue*>& a = value.args->items;
    const auto malformed = [&](const PickleValue& at, const std::string& what) {
      return tensor_error(name, at, "ShardedTensor: " + what);
    };
    if (a.size() < 4 || a[2]->kind != PickleKind::kTuple || a[2]->items.size() < 3 || a[3]->kind != PickleKind::kTuple ||
        a[3]->items.size() < 2) {
      return malformed(value, "expected (rebuild, type, (cls, dtype, size, ...), (local_shards, metadata, ...)) arguments");
    }
    ShardedTensorRecord record;
    record.name = name;
    const PickleValue* dtype = a[2]->items[1];
    const std::optional<DType> found = dtype->kind == PickleKind::kGlobal ? dtype_of_torch_global(dtype->text) : std::nullopt;
    if (!found) return malformed(*dtype, "its dtype is not a torch dtype this reader knows");
    record.dtype = *found;
    TM_ASSIGN_OR_RETURN(std::vector<int64_t> size, int_tuple(a[2]->items[2], *a[2], name, "ShardedTensor size"));
    for (int64_t extent : size) {
      if (extent < 0) return malformed(*a[2], "negative size " + std::to_string(extent));
      record.shape.push_back(static_cast<uint64_t>(extent));
    }
    const PickleValue* shards = a[3]->items[0];
    const PickleValue* metadata = a[3]->items[1];
    if (shards->kind != PickleKind::kList) return malformed(*shards, "local_shards is a " + std::string(pickle_kind_name(shards->kind)));
    const PickleValue* listed = metadata->kind == PickleKind::kObject ? attribute(*metadata, "shards_metadata") : nullptr;
    if (listed == nullptr || listed->kind != PickleKind::kList) return malformed(*metadata, "its metadata lists no shards_metadata");
    record.shards_total = listed->items.size();
    for (const PickleValue* shard : shards->items) {
      const PickleValue* data = shard->kind == PickleKind::kObject ? attribute(*shard, "tensor") : nullptr;
      const PickleValue* where = shard->kind == PickleKind::kObject ? attribute(*shard, "metadata") : nullptr;
      const PickleValue* offsets = where != nullptr && where->kind == PickleKind::kObject ? attribute(*where, "shard_offsets") : nullptr;
      if (data == nullptr || offsets == nullptr) return malformed(*shard, "a local shard without tensor and metadata.shard_offsets");
      TM_ASSIGN_OR_RETURN(std::vector<int64_t> start, int_tuple(offsets, *shard, name, "shard_offsets"));
      TM_ASSIGN_OR_RETURN(Interpretation tensor, interpret(data, name, depth + 1));
      if (tensor.kind != Interpretation::Kind::kTensor) return malformed(*data, "a local shard's tensor is not a stored tensor");
      if (start.size() != record.shape.size() || tensor.view.shape.size() != record.shape.size() || tensor.view.dtype != record.dtype) {
        return malformed(*shard, "a local shard of " + std::to_string(tensor.view.shape.size()) + " dimensions (" +
                                     std::string(dtype_name(tensor.view.dtype)) + ") at " + std::to_string(start.size()) +
                                     " offsets, in a tensor of " + std::to_string(record.shape.size()) + " (" +
                                     std::string(dtype_name(record.dtype)) + ")");
      }
      LocalShard local;
      std::string part;
      bool whole = true;
      for (size_t d = 0; d < start.size(); ++d) {
        const uint64_t begin = static_cast<uint64_t>(start[d]), extent = tensor.view.shape[d];
        if (start[d] < 0 || begin > record.shape[d] || record.shape[d] - begin < extent) {
          return malformed(*shard, "a local shard at offset " + std::to_string(start[d]) + " of size " + std::to_string(extent) +
                                       " in dim " + std::to_string(d) + " reaches outside its " + std::to_string(record.shape[d]));
        }
        local.offsets.push_back(begin);
        whole = whole && extent == record.shape[d];
        part += (d ? ", " : "") + std::to_string(begin) + ":" + std::to_string(begin + extent);
      }
      local.tensor = tensors_.size();
      TM_RETURN_IF_ERROR(add_tensor(whole ? name : name + "[" + part + "]", tensor.view));
      record.local.push_back(std::move(local));
    }
    sharded_.push_back(std::move(record));
    return Status::Ok();
  }

  Result<int64_t> int_arg(const PickleValue* value, const PickleValue& at, const std::string& name,
                          std::string_view what) const {
    if (value->kind != PickleKind::kInt) {
      return tensor_error(name, at, std::string(what) + " is a " + std::string(pickle_kind_name(value->kind)) +
                                        ", not an int");
    }
    return value->integer;
  }

  Result<std::vector<int64_t>> int_tuple(const PickleValue* value, const PickleValue& at, const std::string& name,
                                         std::string_view what) const {
    if (value->kind != PickleKind::kTuple && value->kind != PickleKind::kList) {
      return tensor_error(name, at, std::string(what) + " is a " + std::string(pickle_kind_name(value->kind)) +
                                        ", not a tuple");
    }
    std::vector<int64_t> out;
    out.reserve(value->items.size());
    for (const PickleValue* item : value->items) {
      TM_ASSIGN_OR_RETURN(int64_t v, int_arg(item, at, name, what));
      out.push_back(v);
    }
    return out;
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, ...).
  Result<TensorView> rebuild_view(const std::vector<PickleValue*>& a, const PickleValue& at, const std::string& name,
                                  const std::string& function) {
    if (a.size() < 4) {
      return tensor_error(name, at, function + " takes (storage, storage_offset, size, stride, ...) but got " +
                                        std::to_string(a.size()) + " arguments");
    }
    if (a[0]->kind != PickleKind::kPersistent) {
      return tensor_error(name, at, "storage argument is a " + std::string(pickle_kind_name(a[0]->kind)) +
                                        ", not a persistent storage reference");
    }
    TensorView view;
    uint64_t storage_elems = 0;
    TM_ASSIGN_OR_RETURN(StorageEntry entry, resolve_storage(*a[0], name, &view.dtype, &storage_elems));
    TM_ASSIGN_OR_RETURN(int64_t storage_offset, int_arg(a[1], at, name, "storage_offset"));
    TM_ASSIGN_OR_RETURN(std::vector<int64_t> size, int_tuple(a[2], at, name, "size"));
    TM_ASSIGN_OR_RETURN(std::vector<int64_t> stride, int_tuple(a[3], at, name, "stride"));
    if (size.size() != stride.size()) {
      return tensor_error(name, at, "size has " + std::to_string(size.size()) + " dims but stride has " +
                                        std::to_string(stride.size()));
    }
    if (storage_offset < 0) return tensor_error(name, at, "negative storage_offset " + std::to_string(storage_offset));
    bool empty = false;
    for (size_t d = 0; d < size.size(); ++d) {
      if (size[d] < 0) return tensor_error(name, at, "negative size " + std::to_string(size[d]) + " in dim " + std::to_string(d));
      if (stride[d] < 0) {
        return tensor_error(name, at, "negative stride " + std::to_string(stride[d]) + " in dim " + std::to_string(d) +
                                          " is not supported");
      }
      view.shape.push_back(static_cast<uint64_t>(size[d]));
      empty = empty || size[d] == 0;
    }
    if (!checked_element_count(view.shape).ok()) return tensor_error(name, at, "element count overflows 64 bits");
    // The last element the view touches, relative to storage_offset.
    uint64_t last = 0;
    bool contiguous = true;
    uint64_t expected_stride = 1;
    for (size_t d = size.size(); d-- > 0;) {
      const auto extent = static_cast<uint64_t>(size[d]);
      const auto step = static_cast<uint64_t>(stride[d]);
      if (extent != 1 && step != expected_stride) contiguous = false;
      uint64_t reach = 0;
      if (!empty && (__builtin_mul_overflow(extent - 1, step, &reach) || __builtin_add_overflow(last, reach, &last))) {
        return tensor_error(name, at, "view extent overflows 64 bits");
      }
      if (__builtin_mul_overflow(expected_stride, extent, &expected_stride)) expected_stride = 0;
    }
    const uint64_t element_bytes = dtype_info(view.dtype).block_bytes;
    const auto first = static_cast<uint64_t>(storage_offset);
    uint64_t end_elem = 0;  // one past the last element touched
    if (empty) {
      end_elem = first;
    } else if (__builtin_add_overflow(first, last, &end_elem) || __builtin_add_overflow(end_elem, 1, &end_elem)) {
      return tensor_error(name, at, "view extent overflows 64 bits");
    }
    if (end_elem > storage_elems) {
      return tensor_error(name, at, "view [offset " + std::to_string(first) + ", up to element " +
                                        std::to_string(end_elem) + ") lies outside its storage of " +
                                        std::to_string(storage_elems) + " elements");
    }
    // end_elem <= storage_elems, whose byte size was checked against the entry, so these cannot overflow.
    view.offset = entry.data_offset + first * element_bytes;
    view.nbytes = (end_elem - first) * element_bytes;
    if (!(contiguous || empty)) view.strides = std::move(stride);
    return view;
  }

  Result<StorageEntry> resolve_storage(const PickleValue& persistent, const std::string& name, DType* dtype,
                                       uint64_t* elements) {
    const PickleValue* id = persistent.items.empty() ? nullptr : persistent.items[0];
    if (id == nullptr || id->kind != PickleKind::kTuple || id->items.empty()) {
      return tensor_error(name, persistent, "persistent id is not a ('storage', ...) tuple");
    }
    const std::vector<PickleValue*>& p = id->items;
    if (p[0]->kind != PickleKind::kString || p[0]->text != "storage") {
      return tensor_unsupported(name, persistent, "persistent id of type " +
                                                      quoted_name(p[0]->kind == PickleKind::kString ? p[0]->text : "?") +
                                                      " (only 'storage' is understood)");
    }
    if (p.size() < 5) {
      return tensor_error(name, persistent, "storage id has " + std::to_string(p.size()) +
                                                " fields; expected ('storage', type, key, location, numel)");
    }
    if (p[1]->kind != PickleKind::kGlobal) {
      return tensor_error(name, persistent, "storage type is a " + std::string(pickle_kind_name(p[1]->kind)) +
                                                ", not a torch storage class");
    }
    std::optional<DType> found = lookup(kStorageTypes, p[1]->text);
    if (!found) found = lookup(kDTypeGlobals, p[1]->text);
    if (p[1]->text == "torch.UntypedStorage") {
      // Untyped storages hold bytes unless a torch.<dtype> global follows.
      for (size_t i = 5; i < p.size(); ++i) {
        if (p[i]->kind == PickleKind::kGlobal) {
          if (auto typed = lookup(kDTypeGlobals, p[i]->text)) found = typed;
        }
      }
    }
    if (!found) return tensor_unsupported(name, persistent, "storage type " + p[1]->text + " is not supported");
    *dtype = *found;
    std::optional<std::string> key = key_text(*p[2]);
    if (!key || key->empty()) return tensor_error(name, persistent, "storage key is not a string");
    TM_ASSIGN_OR_RETURN(int64_t numel, int_arg(p[4], persistent, name, "storage numel"));
    if (numel < 0) return tensor_error(name, persistent, "storage numel " + std::to_string(numel) + " is negative");
    *elements = static_cast<uint64_t>(numel);

    const std::string entry_name = std::string(prefix_) + "data/" + *key;
    StorageEntry entry;
    if (auto it = storages_.find(entry_name); it != storages_.end()) {
      entry = it->second;
    } else {
      const ZipEntry* zip_entry = zip_.find(entry_name);
      if (zip_entry == nullptr) {
        return tensor_error(name, persistent, "storage " + quoted_name(*key) + " has no archive entry " + quoted_name(entry_name));
      }
      if (zip_entry->method != kZipMethodStored) {
        return tensor_unsupported(name, persistent, "storage entry " + quoted_name(entry_name) + " is compressed (method " +
                                                        std::to_string(zip_entry->method) +
                                                        "); only stored entries can be mapped");
      }
      if (zip_entry->compressed_size != zip_entry->uncompressed_size) {
        return tensor_error(name, persistent, "stored entry " + quoted_name(entry_name) + " has different compressed and "
                                              "uncompressed sizes");
      }
      TM_ASSIGN_OR_RETURN(entry.data_offset, zip_.data_offset(*zip_entry));
      entry.size = zip_entry->uncompressed_size;
      storages_.emplace(entry_name, entry);
    }
    uint64_t storage_bytes = 0;
    if (__builtin_mul_overflow(*elements, dtype_info(*dtype).block_bytes, &storage_bytes) || storage_bytes > entry.size) {
      return tensor_error(name, persistent, "storage " + quoted_name(*key) + " claims " + std::to_string(numel) + " " +
                                                std::string(dtype_name(*dtype)) + " elements but entry " + quoted_name(entry_name) +
                                                " holds only " + std::to_string(entry.size) + " bytes");
    }
    return entry;
  }

  const ZipArchive& zip_;
  std::string_view prefix_;
  std::string pickle_name_;
  CollectLimits limits_;
  uint64_t visits_ = 0;
  uint64_t cycle_cuts_ = 0;
  std::unordered_set<const PickleValue*> on_path_;
  std::unordered_set<const PickleValue*> tensor_free_;
  std::unordered_map<const PickleValue*, Interpretation> cache_;
  std::unordered_map<std::string, StorageEntry> storages_;
  std::vector<TensorInfo> tensors_;
  std::vector<ShardedTensorRecord> sharded_;
  std::unordered_set<std::string> names_;
  std::vector<std::string> notes_;
  size_t ignored_count_ = 0;
  size_t dropped_notes_ = 0;
  std::vector<std::string> ignored_examples_;
};

}  // namespace

std::optional<DType> dtype_of_torch_global(std::string_view qualified) { return lookup(kDTypeGlobals, qualified); }

Result<TorchTensors> collect_tensors(const PickleTree& tree, const ZipArchive& zip, std::string_view prefix,
                                     std::string_view pickle_name, const CollectLimits& limits) {
  TensorCollector collector(zip, prefix, pickle_name, limits);
  return collector.run(tree);
}

}  // namespace tensormorph::pytorch
