// A restricted pickle virtual machine: it builds a small tree of symbolic values and never imports
// or calls anything. Globals become names, calls become "object of class X" nodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensormorph/status.h"

namespace tensormorph::pytorch {

/// What a pickle value is.
enum class PickleKind : uint8_t {
  kNone,
  kBool,
  kInt,        ///< fits in int64
  kBigInt,     ///< an integer wider than 64 bits (value not kept)
  kFloat,
  kString,     ///< str (UTF-8 as stored)
  kBytes,      ///< bytes / bytearray
  kTuple,
  kList,
  kDict,       ///< dict or collections.OrderedDict, entries in insertion order
  kSet,        ///< set or frozenset
  kGlobal,     ///< a reference to module.name, never resolved
  kObject,     ///< the symbolic result of calling or instantiating something
  kPersistent, ///< a persistent id (items[0] holds the id value)
};

/// One value. Nodes are owned by their PickleTree and refer to each other by plain pointers, so
/// shared and even cyclic references cost nothing and leak nothing.
struct PickleValue {
  PickleKind kind = PickleKind::kNone;
  uint64_t offset = 0;                ///< pickle byte offset of the opcode that created it
  bool boolean = false;               ///< kBool
  int64_t integer = 0;                ///< kInt
  double real = 0;                    ///< kFloat
  std::string text;                   ///< kString/kBytes contents; kGlobal "module.name"
  std::vector<PickleValue*> items;    ///< kTuple/kList/kSet elements; kObject appended items; kPersistent id
  std::vector<std::pair<PickleValue*, PickleValue*>> entries;  ///< kDict entries; kObject items set on it
  PickleValue* callable = nullptr;    ///< kObject: the global (or value) called / instantiated
  PickleValue* args = nullptr;        ///< kObject: the argument tuple
  PickleValue* state = nullptr;       ///< kObject/kDict: the state passed to BUILD

  /// True for a kGlobal naming exactly `qualified` ("module.name").
  bool is_global(std::string_view qualified) const { return kind == PickleKind::kGlobal && text == qualified; }
  /// The value under the string key `key` of a kDict's entries, else nullptr.
  const PickleValue* get(std::string_view key) const {
    for (const auto& [k, v] : entries) {
      if (k->kind == PickleKind::kString && k->text == key) return v;
    }
    return nullptr;
  }
  /// kObject's callable when it is a global, else nullptr.
  const PickleValue* callable_global() const {
    return kind == PickleKind::kObject && callable && callable->kind == PickleKind::kGlobal ? callable : nullptr;
  }
};

/// Human-readable name of a kind ("dict", "tuple", ...).
std::string_view pickle_kind_name(PickleKind kind);

/// Bounds that keep a hostile pickle from exhausting memory.
struct PickleLimits {
  size_t max_stack = 1u << 20;      ///< values on the stack at once
  size_t max_marks = 1u << 16;      ///< nested MARKs at once
  size_t max_memo = 1u << 24;       ///< memo entries
  size_t max_nodes = 1u << 23;      ///< values created plus container insertions, in total
  size_t max_container = 1u << 23;  ///< elements in one list/dict/set
};

/// The values a pickle built; owns every node.
class PickleTree {
 public:
  /// The value STOP returned.
  const PickleValue* root() const { return root_; }
  /// Number of values created.
  size_t node_count() const { return nodes_->size(); }
  /// Distinct globals that were called (REDUCE) or instantiated (NEWOBJ/INST/OBJ), first use first.
  const std::vector<std::string>& called_globals() const { return called_globals_; }

 private:
  friend class PickleMachine;
  std::unique_ptr<std::deque<PickleValue>> nodes_ = std::make_unique<std::deque<PickleValue>>();
  const PickleValue* root_ = nullptr;
  std::vector<std::string> called_globals_;
};

/// Runs the pickle in `bytes` (protocols 0-5) to its STOP opcode. `source` names the stream in
/// errors, e.g. "model.pt: archive/data.pkl"; every error names the pickle byte offset.
Result<PickleTree> run_pickle(std::string_view bytes, std::string_view source, const PickleLimits& limits = {});

}  // namespace tensormorph::pytorch
