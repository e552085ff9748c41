// Joining a tensor-parallel layer's per-rank parts into the whole tensor, by the role Megatron's
// layer names give it (or a user's rule): shared by Megatron-LM's own sets and by DeepSpeed ZeRO
// checkpoints saved with model parallelism, whose parts may themselves be gathered blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/pytorch/pytorch.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::megatron {

/// What the training arguments pickled beside the model say (Megatron's `args`, an argparse Namespace).
struct TrainingArgs {
  bool swiglu = false;                                ///< the MLP's input projection is [gate; up]
  std::optional<int64_t> tensor_parallel_size;        ///< tensor_model_parallel_size
  std::optional<int64_t> pipeline_parallel_size;      ///< pipeline_model_parallel_size
  std::optional<int64_t> virtual_pipeline_size;       ///< model chunks per stage (interleaved schedule)
};

/// Reads `args` from a checkpoint's root dict as data; absent fields stay unset.
TrainingArgs training_args(const pytorch::PickleTree& tree);

/// "'a', 'b', ... and N more": the first five of `names`, quoted, for a note.
std::string names_text(const std::vector<std::string>& names);

/// How one tensor came out of a join.
enum class JoinKind {
  kJoined,      ///< the ranks' parts placed side by side along the split dimension
  kReplicated,  ///< rank 0's copy (every rank holds the whole tensor)
  kPerRank,     ///< the split cannot be inferred, or the parts differ: list each rank's part
};

/// A tensor's join: for kPerRank, `tensor` is empty.
struct JoinResult {
  JoinKind kind = JoinKind::kPerRank;  ///< what was done
  TensorInfo tensor;                   ///< the whole tensor, named as asked
};

/// Joins per-rank parts by layer role (see docs/FORMATS.md) or by the first user rule matching.
class TensorParallelJoin {
 public:
  /// `rules` ("GLOB=DIM", "GLOB=gated", "GLOB=replicated"; OpenOptions::tensor_parallel_rules);
  /// a malformed one is INVALID_ARGUMENT.
  static Result<TensorParallelJoin> make(std::span<const std::string> rules, bool swiglu);

  /// The whole tensor named `global` from `parts` (rank order, file indices already the
  /// checkpoint's; null where a rank lacks it). `layer_name` is the name whose module tells the
  /// role, without a model prefix. Parts may be stored whole or as blocks. A rule naming a
  /// dimension the tensor lacks is INVALID_ARGUMENT.
  Result<JoinResult> join(const std::string& global, std::string_view layer_name, std::span<const TensorInfo* const> parts);

  /// How many tensors a user rule decided.
  uint64_t decided_by_rules() const;

  /// One note per rule that matched no tensor.
  std::vector<std::string> unmatched_rule_notes() const;

 private:
  /// A user's rule, as parsed.
  struct Rule {
    std::string text;   ///< as given
    std::string glob;   ///< matched against the whole tensor's name
    JoinKind kind = JoinKind::kJoined;
    bool gated = false;  ///< SwiGLU gate and up halves, dim 0
    size_t dim = 0;
    uint64_t matched = 0;
  };

  TensorParallelJoin(std::vector<Rule> rules, bool swiglu) : rules_(std::move(rules)), swiglu_(swiglu) {}

  std::vector<Rule> rules_;
  bool swiglu_ = false;
};

}  // namespace tensormorph::megatron
