// What a ZeRO checkpoint's archives say, read from their pickles and checked: the model states'
// parameter shapes and the names around them, and each rank's optimizer states with its flat fp32
// partitions located in the rank's archive.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/megatron/tensor_parallel.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::deepspeed {

/// The prefix DeepSpeed's bf16 optimizer gives its optimizer-states archives' names.
inline constexpr std::string_view kBf16Prefix = "bf16_";

/// "mp_rank_MM": how DeepSpeed names a model-parallel rank inside its archives' names.
std::string mp_rank_name(uint32_t mp);

/// Model-parallel rank `mp`'s model states: `mp_rank_MM_model_states.pt` (ZeRO-1/2), or data-parallel
/// rank `dp`'s `zero_pp_rank_D_mp_rank_MM_model_states.pt` (ZeRO-3).
std::string model_states_name(uint32_t mp, bool zero3, uint64_t dp = 0);

/// Data-parallel rank `dp`'s optimizer states in model-parallel rank `mp`.
std::string optim_states_name(uint64_t dp, uint32_t mp, bool bf16);

/// One optimizer-partitioned parameter as param_shapes lists it.
struct ParamShape {
  std::string name;             ///< the model's parameter name
  std::vector<uint64_t> shape;  ///< its real shape (torch.Size)
  uint64_t elements = 0;        ///< product of shape
};

/// The model-states archive's description of the parameters.
struct ModelStates {
  std::vector<std::vector<ParamShape>> groups;                 ///< param_shapes, per optimizer param group
  std::vector<ParamShape> frozen;                              ///< frozen_param_shapes, in order
  std::vector<std::pair<std::string, std::string>> shared;     ///< shared_params: (alias, the parameter it shares)
  std::string ds_version;                                      ///< "" when absent
  std::optional<int64_t> mp_world_size;                        ///< the model-parallel world size, when recorded
  megatron::TrainingArgs args;                                 ///< Megatron's `args`, when saved beside (Megatron-DeepSpeed)
};

/// Reads param_shapes, frozen_param_shapes, shared_params and ds_version from the model states.
Result<ModelStates> read_model_states(const std::filesystem::path& path);

/// One data-parallel rank's optimizer states.
struct RankStates {
  int64_t zero_stage = 0;       ///< 1, 2 or 3
  int64_t partition_count = 0;  ///< the data-parallel world size (the largest of a per-group list)
  /// The rank's flat fp32 partition per param group (1-D, contiguous), located in its archive
  /// (file set to `file_index`).
  std::vector<TensorInfo> groups;
};

/// Reads the optimizer states of `path`, whose flat partitions are listed as file `file_index`.
Result<RankStates> read_rank_states(const std::filesystem::path& path, uint32_t file_index);

}  // namespace tensormorph::deepspeed
