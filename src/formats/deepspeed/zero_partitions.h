// One model-parallel rank of a ZeRO checkpoint read as a whole checkpoint of its own: its
// parameters cut from its data-parallel ranks' flat fp32 partitions, its frozen parameters and the
// model states' own tensors. deepspeed_reader.cpp joins the model-parallel ranks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/deepspeed/zero_states.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::deepspeed {

/// One model-parallel rank's part of the checkpoint, read as a whole ZeRO checkpoint of its own.
struct RankPart {
  std::vector<TensorInfo> tensors;       ///< files indexed in the whole checkpoint
  std::vector<MetadataEntry> metadata;
  std::vector<std::string> notes;
  std::vector<FormatFact> facts;         ///< the per-file facts; the summary is in the fields below
  std::filesystem::path model_path;  ///< its model states
  ModelStates model;
  int64_t stage = 0;
  uint64_t world = 0;
  size_t groups = 0;
  uint64_t in_place = 0, gathered = 0, padding = 0;
};

/// Model-parallel rank `mp` of the tag directory `tag`, whose data-parallel ranks' optimizer states
/// are `archives` (rank order); its files are appended to `files`, and its tensors' file indices
/// are into that list. `pieces_key` prefixes each parameter's pieces metadata entry.
Result<RankPart> open_model_parallel_rank(const std::filesystem::path& tag, uint32_t mp, const std::vector<std::filesystem::path>& archives,
                                          const std::string& pieces_key, std::vector<SourceFile>& files);

}  // namespace tensormorph::deepspeed
