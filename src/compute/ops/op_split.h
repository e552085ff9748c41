// How an operation cuts into parts that run concurrently on different backends, and how the
// parts' outputs merge into the whole's bit for bit. Part of an operation's definition: the
// scheduler decides how many parts go where, the rule decides where the cuts may fall and what
// merging means. Nothing here knows the scheduler or any backend.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensormorph/c/plugin.h"
#include "tensormorph/status.h"

namespace tensormorph::ops {

/// One tensor of an instance, as a split rule sees it.
struct SplitTensor {
  TM_DType dtype = TM_DTYPE_INVALID;
  std::vector<uint64_t> shape;
  uint64_t nbytes = 0;
};

/// A named attribute value (TM_Attribute's i or f).
struct SplitAttribute {
  std::string name;
  int64_t i = 0;
  double f = 0;
};

/// The shape of a whole instance: what a rule cuts.
struct SplitInstance {
  std::vector<SplitTensor> inputs;
  std::vector<SplitTensor> outputs;
  std::vector<SplitAttribute> attributes;

  /// The integer attribute `name`, or `fallback` when absent.
  int64_t int_attribute(const std::string& name, int64_t fallback = 0) const;
};

/// Bytes [offset, offset + nbytes) of a whole tensor, seen by a part as a tensor of `shape`.
struct Slice {
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  std::vector<uint64_t> shape;
};

/// One part's view of the instance.
struct PartInstance {
  std::vector<Slice> inputs;              ///< a slice of each whole input
  std::vector<Slice> outputs;             ///< written in place into the whole output, or into scratch (merged)
  std::vector<bool> merged;               ///< per output: written to scratch of `nbytes`, combined by merge()
  std::vector<SplitAttribute> attributes; ///< every attribute of the part's instance
};

/// A part's scratch outputs, for merge(): granules [begin, end) and one span per output (empty for
/// outputs written in place).
struct PartResult {
  uint64_t begin = 0, end = 0;
  std::vector<std::span<const std::byte>> scratch;
};

/// The split rule of an operation. An instance cuts into `granules(instance)` granules, in order;
/// a part is a run of granules ([begin, end), or exactly one granule when !parts_span_granules);
/// merge() writes the merged outputs from every part's scratch, the parts in granule order.
struct SplitRule {
  /// Why the operation is never split (empty when it can be).
  std::string never_because;
  /// How the parts' outputs merge, in words (docs/COMPUTE.md lists them).
  std::string merge_rule;
  /// Granules of an instance (< 2: it is not split); INVALID_ARGUMENT when the instance is malformed.
  Result<uint64_t> (*granules)(const SplitInstance& whole) = nullptr;
  /// Whether one part may hold several granules (false: a part is exactly one granule).
  bool parts_span_granules = true;
  /// The part holding granules [begin, end).
  Result<PartInstance> (*part)(const SplitInstance& whole, uint64_t begin, uint64_t end) = nullptr;
  /// Writes the merged outputs (those a part writes to scratch) from `parts`, in granule order.
  Status (*merge)(const SplitInstance& whole, std::span<const PartResult> parts,
                  std::span<const std::span<std::byte>> outputs) = nullptr;

  /// True when the rule can split an instance at all.
  bool splittable() const { return granules != nullptr; }
};

/// Elements per granule of the element-wise rules (a whole number of blocks of every dtype).
inline constexpr uint64_t kSplitChunkElements = 65536;

/// tm.tile_stats@1: granules are tile rows of the view; each part's tiles land in place.
SplitRule tile_stats_split();
/// tm.histogram@1: granules of kSplitChunkElements elements; counts add.
SplitRule histogram_split();
/// tm.radix_histogram@1: granules of kSplitChunkElements elements; counts and classes add.
SplitRule radix_histogram_split();
/// tm.channel_stats@1: granules are aligned power-of-two row blocks; column statistics merge by
/// the column tree's upper levels.
SplitRule channel_stats_split();
/// tm.diff_stats@1: granules are its 65536-element chunks; records land in place.
SplitRule diff_stats_split();
/// tm.decode@1 and tm.subtract@1: granules of kSplitChunkElements elements; values land in place.
SplitRule elementwise_split();
/// A rule that never splits, saying why.
SplitRule never_split(std::string because);

}  // namespace tensormorph::ops
